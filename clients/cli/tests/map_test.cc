#include <gtest/gtest.h>

#include <msgpack.hpp>

#include "clients/cli/json_in.h"
#include "clients/cli/map.h"

namespace sandpool::cli {
namespace {

TEST(Json, ParsesWhatJobLinesUse) {
  auto j = ParseJson(R"( {"shell":"echo \"hi\"\n\u00e9\ud83d\ude00","n":-3,"u":18446744073709551615,
                          "f":1.5e2,"a":[true,false,null],"o":{}} )");
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ(j->Find("shell")->s, "echo \"hi\"\n\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(j->Find("n")->i, -3);
  EXPECT_EQ(j->Find("u")->u, UINT64_MAX);
  EXPECT_EQ(j->Find("f")->d, 150.0);
  EXPECT_EQ(j->Find("a")->items.size(), 3u);
  EXPECT_EQ(j->Find("missing"), nullptr);
}

TEST(Json, RejectsWithWhere) {
  for (const char* bad : {"", "{", "{\"a\":}", "{\"a\":1,}", "[1 2]", "\"\\x\"", "{\"a\":1}x", "01", "\"\\ud800\"",
                          "{\"a\":1,\"a\":2}", "\"tab\there\"", "nul"}) {
    auto j = ParseJson(bad);
    ASSERT_FALSE(j.ok()) << bad;
    EXPECT_NE(j.status().message().find("invalid JSON at byte"), std::string::npos) << bad;
  }
  std::string deep(100, '[');
  EXPECT_FALSE(ParseJson(deep + std::string(100, ']')).ok());
}

TEST(MapLines, JsonLinesBecomeVersion4JobMaps) {
  MapOptions o;
  o.template_name = "default";
  o.timeout_ms = 5000;
  auto job = LineToJob(R"({"v":1,"shell":"true","timeout_ms":7})" "\r\n", 12, o, "map-0123abcd");
  ASSERT_TRUE(std::holds_alternative<LineJob>(job));
  const LineJob& j = std::get<LineJob>(job);
  EXPECT_EQ(j.id, "map-0123abcd-12");
  auto spec = DecodeJob(j.payload, ServerLimits{});
  ASSERT_TRUE(std::holds_alternative<JobSpec>(spec));
  const JobSpec& s = std::get<JobSpec>(spec);
  EXPECT_EQ(s.version, 4u);
  EXPECT_EQ(s.id, "map-0123abcd-12");
  EXPECT_EQ(s.template_name, "default");
  EXPECT_EQ(s.timeout_ms, 7u);  // the line's own value wins over --timeout
  auto own = LineToJob(R"({"id":"mine","argv":["x"]})", 1, o, "map-0123abcd");
  EXPECT_EQ(std::get<LineJob>(own).id, "mine");
}

TEST(MapLines, BadLinesSayWhy) {
  MapOptions o;
  auto code = [&](const char* line) { return std::get<JobError>(LineToJob(line, 1, o, "map-0")).code; };
  EXPECT_EQ(code("not json"), ErrorCode::kBadPayload);
  EXPECT_EQ(code("[1]"), ErrorCode::kBadPayload);
  EXPECT_EQ(code(R"({"shell":5})"), ErrorCode::kBadField);
  EXPECT_EQ(code(R"({"shel":"true"})"), ErrorCode::kBadField);
  EXPECT_EQ(code(R"({"id":"bad id","shell":"true"})"), ErrorCode::kBadField);
}

TEST(MapLines, ShellModeQuotesTheLine) {
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  MapOptions o;
  o.shell = "grep -c {} /etc/{}";
  auto job = LineToJob("a'b\n", 3, o, "map-1");
  auto spec = std::get<JobSpec>(DecodeJob(std::get<LineJob>(job).payload, ServerLimits{}));
  EXPECT_EQ(*spec.shell, "grep -c 'a'\\''b' /etc/'a'\\''b'");
  o.shell = "echo";
  auto appended = std::get<JobSpec>(DecodeJob(std::get<LineJob>(LineToJob("x y", 1, o, "m")).payload, ServerLimits{}));
  EXPECT_EQ(*appended.shell, "echo 'x y'");
}

TEST(MapLines, ResumeReadsIdsAndTheRun) {
  auto r = ReadResumed("{\"line\":1,\"id\":\"map-0123abcd-1\"}\n{\"id\":\"own\"}\n{\"line\":3,\"id\":\"map-0123ab");
  EXPECT_EQ(r.ids, (std::set<std::string>{"map-0123abcd-1", "own"}));
  EXPECT_EQ(r.run, "map-0123abcd");
  EXPECT_EQ(ReadResumed("").run, "");
}

TEST(MapOptionsTest, Parse) {
  GlobalOptions g;
  auto o = ParseMapOptions({"--concurrency", "8", "--template=py", "--resume", "jobs.jsonl"}, &g);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->concurrency, 8u);
  EXPECT_EQ(o->template_name, "py");
  EXPECT_TRUE(o->resume);
  EXPECT_EQ(o->input, "jobs.jsonl");
  EXPECT_FALSE(ParseMapOptions({"--concurrency", "0"}, &g).ok());
  EXPECT_FALSE(ParseMapOptions({"--bogus"}, &g).ok());
  EXPECT_FALSE(ParseMapOptions({"a", "b"}, &g).ok());
}

}  // namespace
}  // namespace sandpool::cli
