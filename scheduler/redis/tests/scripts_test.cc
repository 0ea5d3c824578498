// The Lua scripts against a real redis-server: each compiles, and the SHA-1 the daemon sends with
// EVALSHA (common/sha1.h) is the one Redis gives it, so a preloaded script is found by its hash.
#include "scheduler/redis/scripts.h"

#include <gtest/gtest.h>

#include <set>

#include "common/sha1.h"
#include "tests/support/redis_server.h"

namespace sandpool {
namespace {

TEST(Scripts, EachCompilesInRedisUnderTheHashTheDaemonSends) {
  TestRedisServer server;
  if (!server.Start()) GTEST_SKIP() << "redis-server not available";
  auto redis = MustConnect(server.UnixUrl());
  ASSERT_NE(redis, nullptr);
  std::set<std::string> seen;
  for (const char* body : AllScripts()) {
    auto r = redis->Command({"SCRIPT", "LOAD", body});
    ASSERT_TRUE(r.ok()) << r.status().message() << "\n" << body;
    std::string sha((*r)->str, (*r)->len);
    EXPECT_EQ(sha, Sha1Hex(body));
    EXPECT_TRUE(seen.insert(sha).second) << "a script is listed twice";
  }
  EXPECT_EQ(seen.size(), 12u) << "AllScripts() lists every script of scripts.h";
}

}  // namespace
}  // namespace sandpool
