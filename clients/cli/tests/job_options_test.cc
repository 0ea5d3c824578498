#include "clients/cli/job_options.h"

#include <filesystem>
#include <gtest/gtest.h>

namespace sandpool::cli {
namespace {

Result<std::string> FakeStdin() { return std::string("from-stdin"); }

Result<JobOptions> Parse(std::vector<std::string> args, GlobalOptions* g = nullptr) {
  GlobalOptions local;
  return ParseJobOptions(args, g ? g : &local, &FakeStdin);
}

TEST(JobOptions, CommandAfterDashDash) {
  auto o = Parse({"--timeout", "1.5", "--env", "A=1", "--env=B=x=y", "--cwd", "/tmp", "--",
                  "ls", "--timeout", "-l"});
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->spec.argv, (std::vector<std::string>{"ls", "--timeout", "-l"}));
  EXPECT_FALSE(o->spec.shell.has_value());
  EXPECT_EQ(o->spec.timeout_ms, 1500u);
  ASSERT_EQ(o->spec.env.size(), 2u);
  EXPECT_EQ(o->spec.env[1].first, "B");
  EXPECT_EQ(o->spec.env[1].second, "x=y");
  EXPECT_EQ(o->spec.cwd, "/tmp");
  EXPECT_EQ(o->spec.id.size(), 32u);
  EXPECT_TRUE(ValidJobId(o->spec.id));
  EXPECT_FALSE(o->send_max_output);
}

TEST(JobOptions, CommandWithoutDashDashStopsOptionParsing) {
  auto o = Parse({"--json", "echo", "--json"});
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->json);
  EXPECT_EQ(o->spec.argv, (std::vector<std::string>{"echo", "--json"}));
}

TEST(JobOptions, ShellAndOthers) {
  GlobalOptions g;
  auto o = Parse({"--shell", "echo hi", "--timeout-ms=250", "--max-output", "64k", "--id",
                  "my.job-1", "--retries", "2", "--stdin", "--queue", "fast", "--prefix=sp"},
                 &g);
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->spec.shell, "echo hi");
  EXPECT_TRUE(o->spec.argv.empty());
  EXPECT_EQ(o->spec.timeout_ms, 250u);
  EXPECT_EQ(o->spec.max_output_bytes, 65536u);
  EXPECT_TRUE(o->send_max_output);
  EXPECT_EQ(o->spec.id, "my.job-1");
  EXPECT_EQ(o->spec.retries, 2u);
  EXPECT_EQ(o->spec.stdin_data, "from-stdin");
  EXPECT_EQ(g.queue, "fast");
  EXPECT_EQ(g.prefix, "sp");
}

TEST(JobOptions, LaterEnvWins) {
  auto o = Parse({"--env", "A=1", "--env", "A=2", "--", "x"});
  ASSERT_TRUE(o.ok());
  ASSERT_EQ(o->spec.env.size(), 1u);
  EXPECT_EQ(o->spec.env[0].second, "2");
}

TEST(JobOptions, Errors) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {},
           {"--"},
           {"--shell", "x", "--", "ls"},
           {"--shell"},
           {"--timeout", "0", "--", "x"},
           {"--timeout", "-1", "--", "x"},
           {"--timeout", "1.2345", "--", "x"},
           {"--timeout", "abc", "--", "x"},
           {"--timeout", "1", "--timeout-ms", "5", "--", "x"},
           {"--timeout-ms", "0", "--", "x"},
           {"--env", "NOEQUALS", "--", "x"},
           {"--env", "1BAD=x", "--", "x"},
           {"--cwd", "relative", "--", "x"},
           {"--id", "has space", "--", "x"},
           {"--id", std::string(129, 'a'), "--", "x"},
           {"--retries", "6", "--", "x"},
           {"--max-output", "lots", "--", "x"},
           {"--stdin", "--stdin-file", "/etc/hostname", "--", "x"},
           {"--stdin-file", "/nonexistent/file", "--", "x"},
           {"--bogus", "--", "x"},
           {"--redis", "", "--", "x"},
       }) {
    auto o = Parse(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_FALSE(o.ok()) << joined;
  }
}

TEST(JobOptions, Help) {
  auto o = Parse({"--env", "A=1", "--help"});
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->help);
}

TEST(JobOptions, StdinFile) {
  std::string tmpl = std::filesystem::temp_directory_path().string() + "/sp_cli_stdin_XXXXXX";
  char* path = tmpl.data();
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "a\0b", 3), 3);
  close(fd);
  auto o = Parse({"--stdin-file", path, "--", "cat"});
  unlink(path);
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->spec.stdin_data, std::string("a\0b", 3));
}

TEST(Parsers, Seconds) {
  EXPECT_EQ(ParseSeconds("2").value(), 2000u);
  EXPECT_EQ(ParseSeconds("0.5").value(), 500u);
  EXPECT_EQ(ParseSeconds(".25").value(), 250u);
  EXPECT_EQ(ParseSeconds("1.05").value(), 1050u);
  EXPECT_FALSE(ParseSeconds("0").ok());
  EXPECT_FALSE(ParseSeconds("0.0001").ok());
  EXPECT_FALSE(ParseSeconds("1.").ok());
  EXPECT_FALSE(ParseSeconds("").ok());
  EXPECT_FALSE(ParseSeconds("1e3").ok());
  EXPECT_FALSE(ParseSeconds("99999999999999999999").ok());
}

TEST(Parsers, ByteSize) {
  EXPECT_EQ(ParseByteSize("0").value(), 0u);
  EXPECT_EQ(ParseByteSize("100").value(), 100u);
  EXPECT_EQ(ParseByteSize("2K").value(), 2048u);
  EXPECT_EQ(ParseByteSize("16M").value(), 16u << 20);
  EXPECT_EQ(ParseByteSize("1g").value(), 1u << 30);
  EXPECT_FALSE(ParseByteSize("").ok());
  EXPECT_FALSE(ParseByteSize("M").ok());
  EXPECT_FALSE(ParseByteSize("1T").ok());
  EXPECT_FALSE(ParseByteSize("-1").ok());
  EXPECT_FALSE(ParseByteSize("99999999999999G").ok());
}

TEST(Parsers, JobIdsAreRandom) {
  auto a = NewJobId(), b = NewJobId();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a.value(), b.value());
  EXPECT_EQ(a.value().find_first_not_of("0123456789abcdef"), std::string::npos);
}

}  // namespace
}  // namespace sandpool::cli
