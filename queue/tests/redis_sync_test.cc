// SyncRedis against a real redis-server started privately per test suite (tests/support/
// redis_server.h: unix socket + a free TCP port, no persistence), killed at the end.
#include "queue/redis_sync.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/fd.h"
#include "tests/support/redis_server.h"

namespace sandpool {
namespace {

std::string Str(const ReplyPtr& r) { return std::string(r->str, r->len); }

class SyncRedisTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!TestRedisServerPath()) return;
    server_ = new TestRedisServer();
    if (!server_->Start({})) {
      delete server_;
      server_ = nullptr;
    }
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    if (!server_) GTEST_SKIP() << "redis-server not available";
  }
  static TestRedisServer* server_;
};
TestRedisServer* SyncRedisTest::server_ = nullptr;

TEST_F(SyncRedisTest, UnixSocketBinarySafe) {
  auto c = MustConnect(server_->UnixUrl());
  ASSERT_TRUE(c);
  std::string key("k\0ey", 4), val("v\0a\xffl\r\n", 7);
  auto set = c->Command({"SET", key, val});
  ASSERT_TRUE(set.ok()) << set.status().message();
  auto get = c->Command({"GET", key});
  ASSERT_TRUE(get.ok());
  ASSERT_EQ(get.value()->type, REDIS_REPLY_STRING);
  EXPECT_EQ(Str(get.value()), val);
  auto missing = c->Command({"GET", "no-such-key"});
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing.value()->type, REDIS_REPLY_NIL);
}

TEST_F(SyncRedisTest, Tcp) {
  auto c = MustConnect(server_->TcpUrl());
  ASSERT_TRUE(c);
  auto r = c->Command({"PING"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Str(r.value()), "PONG");
}

TEST_F(SyncRedisTest, ErrorReplyIsErrorStatus) {
  auto c = MustConnect(server_->UnixUrl());
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->Command({"SET", "str", "x"}).ok());
  auto r = c->Command({"LPUSH", "str", "y"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("WRONGTYPE"), std::string::npos) << r.status().message();
  // The connection stays usable after an error reply.
  EXPECT_TRUE(c->Command({"PING"}).ok());
  EXPECT_FALSE(c->Command({}).ok());
}

TEST_F(SyncRedisTest, SelectDb) {
  RedisUrl u = server_->UnixUrl();
  u.db = 3;
  auto c3 = MustConnect(u);
  auto c0 = MustConnect(server_->UnixUrl());
  ASSERT_TRUE(c3 && c0);
  ASSERT_TRUE(c3->Command({"SET", "only-in-3", "1"}).ok());
  auto r0 = c0->Command({"EXISTS", "only-in-3"});
  ASSERT_TRUE(r0.ok());
  EXPECT_EQ(r0.value()->integer, 0);
  auto r3 = c3->Command({"EXISTS", "only-in-3"});
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(r3.value()->integer, 1);
  u.db = 99;  // beyond the default 16 databases
  auto bad = SyncRedis::Connect(u, 1000);
  EXPECT_FALSE(bad.ok());
}

TEST_F(SyncRedisTest, PipelinedRepliesComeFromTheBuffer) {
  auto c = MustConnect(server_->UnixUrl());
  ASSERT_TRUE(c);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(c->Append({"ECHO", std::to_string(i)}).ok());
  for (int i = 0; i < 50; ++i) {
    auto r = c->ReadReply(1000);
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().message();
    EXPECT_EQ(Str(r.value()), std::to_string(i));
  }
  auto none = c->ReadReply(0);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().sys_errno(), ETIMEDOUT);
}

TEST_F(SyncRedisTest, SubscribeTimeoutDoesNotPoison) {
  auto sub = MustConnect(server_->UnixUrl());
  auto pub = MustConnect(server_->TcpUrl());
  ASSERT_TRUE(sub && pub);
  ASSERT_TRUE(sub->Append({"SUBSCRIBE", "chan"}).ok());
  auto ack = sub->ReadReply(2000);
  ASSERT_TRUE(ack.ok()) << ack.status().message();
  ASSERT_EQ(ack.value()->type, REDIS_REPLY_ARRAY);
  EXPECT_EQ(std::string(ack.value()->element[0]->str), "subscribe");

  int64_t t0 = MonotonicUs();
  auto nothing = sub->ReadReply(150);
  int64_t waited = MonotonicUs() - t0;
  ASSERT_FALSE(nothing.ok());
  EXPECT_EQ(nothing.status().sys_errno(), ETIMEDOUT);
  EXPECT_GE(waited, 140'000);
  EXPECT_LT(waited, 2'000'000);

  // Timeouts longer than the connect timeout (which hiredis also sets on the socket) must not
  // turn into socket errors either.
  auto sub_short = MustConnect(server_->UnixUrl(), 100);
  ASSERT_TRUE(sub_short);
  ASSERT_TRUE(sub_short->Append({"SUBSCRIBE", "chan"}).ok());
  ASSERT_TRUE(sub_short->ReadReply(2000).ok());
  std::thread later([&] {
    usleep(400'000);
    auto p = pub->Command({"PUBLISH", "chan", std::string("m\0sg", 4)});
    EXPECT_TRUE(p.ok());
  });
  auto msg = sub_short->ReadReply(3000);
  later.join();
  ASSERT_TRUE(msg.ok()) << msg.status().message();
  ASSERT_EQ(msg.value()->elements, 3u);
  EXPECT_EQ(std::string(msg.value()->element[2]->str, msg.value()->element[2]->len),
            std::string("m\0sg", 4));
  // The first subscriber got it too, after its timeout.
  auto msg1 = sub->ReadReply(2000);
  ASSERT_TRUE(msg1.ok()) << msg1.status().message();
  EXPECT_EQ(std::string(msg1.value()->element[0]->str), "message");
}

TEST_F(SyncRedisTest, CommandTimeoutRetiresConnection) {
  auto c = MustConnect(server_->UnixUrl(), 200);
  ASSERT_TRUE(c);
  auto r = c->Command({"DEBUG", "SLEEP", "1"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().sys_errno(), ETIMEDOUT);
  // The late "+OK" must never be mistaken for the reply to a later command.
  EXPECT_FALSE(c->Command({"PING"}).ok());
}

TEST_F(SyncRedisTest, LargeValue) {
  auto c = MustConnect(server_->TcpUrl());
  ASSERT_TRUE(c);
  std::string big(8 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>(i >> 12);
  ASSERT_TRUE(c->Command({"SET", "big", big}).ok());
  auto g = c->Command({"GET", "big"});
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(Str(g.value()) == big);
}

TEST(SyncRedisConnect, RefusedAndMissingSocket) {
  RedisUrl u;
  u.unix_path = "/nonexistent/dir/redis.sock";
  auto c = SyncRedis::Connect(u, 500);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("unix:///nonexistent"), std::string::npos)
      << c.status().message();
  RedisUrl t;
  t.host = "127.0.0.1";
  t.port = FreeTcpPort();
  EXPECT_FALSE(SyncRedis::Connect(t, 500).ok());
}

class SyncRedisAuthTest : public SyncRedisTest {
 protected:
  static void SetUpTestSuite() {
    if (!TestRedisServerPath()) return;
    server_ = new TestRedisServer();
    if (!server_->Start({"--requirepass", "pa:ss@word"})) {
      delete server_;
      server_ = nullptr;
    }
  }
};

TEST_F(SyncRedisAuthTest, PasswordRequired) {
  auto none = MustConnect(server_->UnixUrl());
  ASSERT_TRUE(none);
  auto r = none->Command({"GET", "x"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("NOAUTH"), std::string::npos);

  RedisUrl wrong = server_->UnixUrl();
  wrong.password = "nope";
  auto w = SyncRedis::Connect(wrong, 1000);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("AUTH"), std::string::npos);

  auto parsed = ParseRedisUrl("redis://:pa%3Ass%40word@127.0.0.1:1");
  ASSERT_TRUE(parsed.ok());
  RedisUrl good = server_->TcpUrl();
  good.password = parsed->password;
  good.db = 2;
  auto g = MustConnect(good);
  ASSERT_TRUE(g);
  EXPECT_TRUE(g->Command({"SET", "x", "1"}).ok());
}

TEST_F(SyncRedisAuthTest, AclUser) {
  RedisUrl admin = server_->UnixUrl();
  admin.password = "pa:ss@word";
  auto a = MustConnect(admin);
  ASSERT_TRUE(a);
  auto set = a->Command({"ACL", "SETUSER", "alice", "on", ">alice-pw", "~*", "&*", "+@all"});
  ASSERT_TRUE(set.ok()) << set.status().message();

  RedisUrl alice = server_->TcpUrl();
  alice.user = "alice";
  alice.password = "alice-pw";
  auto c = MustConnect(alice);
  ASSERT_TRUE(c);
  auto who = c->Command({"ACL", "WHOAMI"});
  ASSERT_TRUE(who.ok());
  EXPECT_EQ(Str(who.value()), "alice");

  alice.password = "wrong";
  EXPECT_FALSE(SyncRedis::Connect(alice, 1000).ok());
}

}  // namespace
}  // namespace sandpool
