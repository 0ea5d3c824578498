#include "queue/redis_url.h"

#include <gtest/gtest.h>

namespace sandpool {
namespace {

RedisUrl Must(std::string_view s) {
  auto r = ParseRedisUrl(s);
  EXPECT_TRUE(r.ok()) << s << ": " << r.status().message();
  return r.ok() ? r.value() : RedisUrl{};
}

TEST(RedisUrl, HostPort) {
  RedisUrl u = Must("redis://127.0.0.1:6380");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, 6380);
  EXPECT_TRUE(u.unix_path.empty());
  EXPECT_TRUE(u.user.empty());
  EXPECT_TRUE(u.password.empty());
  EXPECT_EQ(u.db, 0);
  EXPECT_EQ(Must("redis://localhost").port, 6379) << "port defaults";
  EXPECT_EQ(Must("redis://h:1/15").db, 15);
  EXPECT_EQ(Must("redis://h:1/").db, 0);
}

TEST(RedisUrl, Ipv6) {
  RedisUrl u = Must("redis://[::1]:7000/2");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.port, 7000);
  EXPECT_EQ(u.db, 2);
  EXPECT_EQ(Must("redis://[fe80::1]").port, 6379);
  EXPECT_FALSE(ParseRedisUrl("redis://::1:6379").ok());
  EXPECT_FALSE(ParseRedisUrl("redis://[::1:6379").ok());
  EXPECT_FALSE(ParseRedisUrl("redis://[::1]x").ok());
}

TEST(RedisUrl, Credentials) {
  RedisUrl u = Must("redis://alice:s3cret@h:1");
  EXPECT_EQ(u.user, "alice");
  EXPECT_EQ(u.password, "s3cret");
  RedisUrl p = Must("redis://:pw@h:1");
  EXPECT_TRUE(p.user.empty());
  EXPECT_EQ(p.password, "pw");
  RedisUrl enc = Must("redis://us%40er:p%3Aa%2Fs%25s%40@h:1/3");
  EXPECT_EQ(enc.user, "us@er");
  EXPECT_EQ(enc.password, "p:a/s%s@");
  EXPECT_EQ(enc.db, 3);
  // An unescaped '@' in the password still splits at the last '@'.
  RedisUrl at = Must("redis://u:p@ss@h:1");
  EXPECT_EQ(at.password, "p@ss");
  EXPECT_EQ(at.host, "h");
  EXPECT_FALSE(ParseRedisUrl("redis://u:p%4@h:1").ok());
  EXPECT_FALSE(ParseRedisUrl("redis://u:p%zz@h:1").ok());
  EXPECT_FALSE(ParseRedisUrl("redis://u:p%@h:1").ok());
}

TEST(RedisUrl, Unix) {
  RedisUrl u = Must("unix:///tmp/redis.sock");
  EXPECT_EQ(u.unix_path, "/tmp/redis.sock");
  EXPECT_TRUE(u.host.empty());
  EXPECT_EQ(u.db, 0);
  EXPECT_EQ(Must("unix:///run/r.sock?db=4").db, 4);
  RedisUrl pw = Must("unix:///run/r.sock?db=1&password=a%26b");
  EXPECT_EQ(pw.password, "a&b");
  EXPECT_FALSE(ParseRedisUrl("unix://relative.sock").ok());
  EXPECT_FALSE(ParseRedisUrl("unix://").ok());
  EXPECT_FALSE(ParseRedisUrl("unix:///r.sock?db=x").ok());
  EXPECT_FALSE(ParseRedisUrl("unix:///r.sock?foo=1").ok());
}

TEST(RedisUrl, Errors) {
  for (const char* bad : {"", "127.0.0.1:6379", "http://h:1", "redis://", "redis://:1",
                          "redis://h:0", "redis://h:65536", "redis://h:x", "redis://h:",
                          "redis://h:1/x", "redis://h:1/-1", "redis://h:1/1/2"}) {
    auto r = ParseRedisUrl(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().message().rfind("invalid Redis URL", 0), 0u) << bad;
    }
  }
  // Error messages never contain the password.
  auto r = ParseRedisUrl("redis://u:topsecret@h:notaport");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().find("topsecret"), std::string::npos);
}

TEST(RedisUrl, Redacted) {
  EXPECT_EQ(Must("redis://u:pw@h:1/2").Redacted(), "redis://u:***@h:1/2");
  EXPECT_EQ(Must("redis://:pw@h:1").Redacted(), "redis://:***@h:1");
  EXPECT_EQ(Must("redis://h").Redacted(), "redis://h:6379");
  EXPECT_EQ(Must("redis://[::1]:5").Redacted(), "redis://[::1]:5");
  EXPECT_EQ(Must("unix:///s?db=3&password=x").Redacted(), "unix:///s?db=3&password=***");
}

}  // namespace
}  // namespace sandpool
