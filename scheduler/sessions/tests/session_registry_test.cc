// SessionRegistry against a real redis-server, driven by a real libevent loop: a record and the
// sets that list it change together, and reconciling after a restart keeps Redis and the disk
// in agreement.
#include "scheduler/sessions/session_registry.h"

#include <event2/event.h>
#include <gtest/gtest.h>

#include <set>

#include "common/clock.h"
#include "scheduler/redis/scripts.h"
#include "tests/support/redis_server.h"

namespace sandpool {
namespace {

class SessionRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!server_.Start()) GTEST_SKIP() << "redis-server not available";
    sync_ = MustConnect(server_.UnixUrl());
    ASSERT_NE(sync_, nullptr);
    base_ = event_base_new();
    config_.consumer = "host-a";
    config_.result_ttl_s = 100;
    cmd_ = std::make_unique<RedisAsync>(base_, server_.UnixUrl(), "test", RedisAsync::Hooks{});
    cmd_->PreloadScripts(AllScripts());
    cmd_->Connect();
    ASSERT_TRUE(RunUntil([&] { return cmd_->connected(); }));
    registry_ = std::make_unique<SessionRegistry>(cmd_.get(), keys_, config_);
  }
  void TearDown() override {
    registry_.reset();
    cmd_.reset();
    if (base_) event_base_free(base_);
  }

  // Runs the loop until `done` (false after 10 s).
  template <typename F>
  bool RunUntil(F done) {
    int64_t deadline = MonotonicUs() + 10'000'000;
    while (!done()) {
      if (MonotonicUs() > deadline) return false;
      event_base_loop(base_, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    }
    return true;
  }
  std::string Get(const std::vector<std::string>& args) {
    auto r = sync_->Command(args);
    return r.ok() && (*r)->type == REDIS_REPLY_STRING ? std::string((*r)->str, (*r)->len) : "";
  }
  std::set<std::string> Members(const std::string& key) {
    std::set<std::string> out;
    auto r = sync_->Command({"SMEMBERS", key});
    if (r.ok()) {
      for (size_t i = 0; i < (*r)->elements; ++i) out.insert(std::string((*r)->element[i]->str, (*r)->element[i]->len));
    }
    return out;
  }
  int64_t Ttl(const std::string& key) {
    auto r = sync_->Command({"TTL", key});
    return r.ok() ? (*r)->integer : -3;
  }
  SessionMeta Meta(const std::string& id) {
    SessionMeta m;
    m.id = id;
    m.template_name = "default";
    m.created_ms = 5;
    m.labels = {{"k", "v"}};
    return m;
  }
  bool Write(const SessionMeta& m, const char* state) {
    std::optional<bool> written;
    registry_->Write(m, SessionRecordState{state, 7, 9, ""}, [&](bool ok) { written = ok; });
    return RunUntil([&] { return written.has_value(); }) && *written;
  }

  TestRedisServer server_;
  std::unique_ptr<SyncRedis> sync_;
  struct event_base* base_ = nullptr;
  DaemonConfig config_;
  Keys keys_{"sp"};
  std::unique_ptr<RedisAsync> cmd_;
  std::unique_ptr<SessionRegistry> registry_;
};

TEST_F(SessionRegistryTest, AWriteMakesTheRecordAndListsItAndItsHost) {
  ASSERT_TRUE(sync_->Command({"EXPIRE", keys_.Session("s1"), "1000"}).ok());  // a record about to go
  ASSERT_TRUE(Write(Meta("s1"), "running"));
  EXPECT_EQ(Get({"HGET", keys_.Session("s1"), "state"}), "running");
  EXPECT_EQ(Get({"HGET", keys_.Session("s1"), "consumer"}), "host-a");
  EXPECT_EQ(Get({"HGET", keys_.Session("s1"), "last_used_ms"}), "7");
  EXPECT_EQ(Get({"HGET", keys_.Session("s1"), "timeout_at_ms"}), "9");
  EXPECT_EQ(Ttl(keys_.Session("s1")), -1) << "a held session's record does not expire";
  EXPECT_EQ(Members(keys_.Sessions()), std::set<std::string>{"s1"});
  EXPECT_EQ(Members(keys_.HostSessions("host-a")), std::set<std::string>{"s1"});
  EXPECT_EQ(Members(keys_.SessionHosts()), std::set<std::string>{"host-a"});
}

TEST_F(SessionRegistryTest, AWriteRedisRefusesIsReportedNotWritten) {
  // The record's key holds another type: the script fails, and the caller hears so.
  ASSERT_TRUE(sync_->Command({"SET", keys_.Session("bad"), "x"}).ok());
  EXPECT_FALSE(Write(Meta("bad"), "running"));
  EXPECT_TRUE(Members(keys_.Sessions()).empty()) << "nothing half written";
}

TEST_F(SessionRegistryTest, ForgetMarksDestroyedForTheTtlAndFreesTheId) {
  ASSERT_TRUE(Write(Meta("s2"), "running"));
  registry_->Forget("s2");
  ASSERT_TRUE(RunUntil([&] { return Get({"HGET", keys_.Session("s2"), "state"}) == "destroyed"; }));
  int64_t ttl = Ttl(keys_.Session("s2"));
  EXPECT_GT(ttl, 0);
  EXPECT_LE(ttl, 100);
  EXPECT_TRUE(Members(keys_.Sessions()).empty());
  EXPECT_TRUE(Members(keys_.HostSessions("host-a")).empty());
}

TEST_F(SessionRegistryTest, ReconcileForgetsRecordsWithoutFilesAndReportsSessionsDestroyedAway) {
  ASSERT_TRUE(Write(Meta("on-disk"), "stopped"));
  ASSERT_TRUE(Write(Meta("no-files"), "running"));
  ASSERT_TRUE(Write(Meta("destroyed-away"), "stopped"));
  // A peer destroyed it while this host was away.
  ASSERT_TRUE(sync_->Command({"HSET", keys_.Session("destroyed-away"), "state", "destroyed"}).ok());
  std::vector<std::string> away;
  bool done = false;
  registry_->Reconcile({"on-disk", "destroyed-away"}, [&](const std::string& sid) { away.push_back(sid); },
                       [&] { done = true; });
  ASSERT_TRUE(RunUntil([&] { return done && Get({"HGET", keys_.Session("no-files"), "state"}) == "destroyed"; }));
  EXPECT_EQ(away, std::vector<std::string>{"destroyed-away"});
  EXPECT_EQ(Get({"HGET", keys_.Session("on-disk"), "state"}), "stopped");
  EXPECT_EQ(Members(keys_.HostSessions("host-a")), (std::set<std::string>{"on-disk", "destroyed-away"}));
}

}  // namespace
}  // namespace sandpool
