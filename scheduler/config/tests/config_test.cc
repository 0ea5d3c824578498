#include "scheduler/config/config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace sandpool {
namespace {

Status Parse(std::vector<std::string> args, DaemonConfig* c) {
  std::vector<char*> argv = {const_cast<char*>("sandpoold")};
  for (auto& a : args) argv.push_back(a.data());
  bool exit_now;
  return ParseConfig(static_cast<int>(argv.size()), argv.data(), c, &exit_now);
}

TEST(Config, FlagsBeatEnvironmentBeatsFile) {
  std::string path = ::testing::TempDir() + "/sandpool.conf";
  {
    std::ofstream f(path);
    f << "# comment\nworkers = 3\nqueue = fromfile\nmemory = 64M\n";
  }
  ::setenv("SANDPOOL_QUEUE", "fromenv", 1);
  DaemonConfig c;
  ASSERT_TRUE(Parse({"--config", path, "--workers=5"}, &c).ok());
  ::unsetenv("SANDPOOL_QUEUE");
  EXPECT_EQ(c.workers, 5u);
  EXPECT_EQ(c.queue, "fromenv");
  EXPECT_EQ(c.sandbox.cgroup.memory_bytes, 64ull << 20);
}

TEST(Config, ErrorsNameTheOption) {
  DaemonConfig c;
  Status s = Parse({"--workers", "many"}, &c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--workers"), std::string::npos);
  EXPECT_FALSE(Parse({"--no-such-option", "1"}, &c).ok());
  EXPECT_FALSE(Parse({"--redis", "http://x"}, &c).ok());
  EXPECT_FALSE(Parse({"--consumer", "a b"}, &c).ok());
  EXPECT_FALSE(Parse({"--lease-ms", "10", "--heartbeat-ms", "1000"}, &c).ok());
  EXPECT_FALSE(Parse({"--uid-base", "0"}, &c).ok());
  EXPECT_FALSE(Parse({"--cpu-policy", "fifo"}, &c).ok());
}

TEST(Config, CpuPolicyIsBatchUnlessToldOther) {
  DaemonConfig c;
  ASSERT_TRUE(Parse({}, &c).ok());
  EXPECT_TRUE(c.cpu_batch);
  ASSERT_TRUE(Parse({"--cpu-policy", "other"}, &c).ok());
  EXPECT_FALSE(c.cpu_batch);
}

TEST(Config, ParsesSizesAndCpus) {
  EXPECT_EQ(*ParseSize("512M"), 512ull << 20);
  EXPECT_EQ(*ParseSize("2g"), 2ull << 30);
  EXPECT_EQ(*ParseSize("100"), 100u);
  EXPECT_FALSE(ParseSize("-1").ok());
  EXPECT_FALSE(ParseSize("99999999999999999999G").ok());
  DaemonConfig c;
  ASSERT_TRUE(Parse({"--cpus", "0.5"}, &c).ok());
  EXPECT_EQ(c.sandbox.cgroup.cpu_quota_us, c.sandbox.cgroup.cpu_period_us / 2);
  EXPECT_FALSE(Parse({"--cpus", "0"}, &c).ok());
}

// Found by the fuzzers (tests/fuzz/regressions): each is refused now.
TEST(Config, RefusesWhatTheFuzzersFound) {
  std::string path = ::testing::TempDir() + "/sandpool-nul.conf";
  {
    std::ofstream f(path, std::ios::binary);
    f << "memory = 64" << '\0' << "G\n";
  }
  DaemonConfig a;
  EXPECT_FALSE(Parse({"--config", path}, &a).ok()) << "a NUL ends no number early";
  DaemonConfig b;
  EXPECT_FALSE(Parse({"--heartbeat-ms", "6148914691236517206", "--lease-ms", "2"}, &b).ok()) << "no wrap in lease >= 3 x heartbeat";
  DaemonConfig c;
  EXPECT_FALSE(Parse({"--workers", "4294967297"}, &c).ok()) << "no silent 32-bit truncation";
  DaemonConfig d;
  EXPECT_FALSE(Parse({"--cpus", "0.001"}, &d).ok()) << "a quota below the kernel's 1 ms";
  DaemonConfig e;
  EXPECT_TRUE(Parse({"--cpus", "0.01"}, &e).ok());
}

}  // namespace
}  // namespace sandpool
