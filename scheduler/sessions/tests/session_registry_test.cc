// SessionRegistry against a real redis-server, driven by a real libevent loop: a record and the
// sets that list it change together, and reconciling after a restart keeps Redis and the disk
// in agreement.
#include "scheduler/sessions/session_registry.h"

#include <gtest/gtest.h>

#include <set>

#include "scheduler/redis/tests/loop_redis_test.h"

namespace sandpool {
namespace {

class SessionRegistryTest : public LoopRedisTest {
 protected:
  void SetUp() override {
    config_.consumer = "host-a";
    config_.result_ttl_s = 100;
    LoopRedisTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    registry_ = std::make_unique<SessionRegistry>(cmd_.get(), keys_, config_);
  }
  void TearDown() override {
    registry_.reset();
    LoopRedisTest::TearDown();
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

  DaemonConfig config_;
  Keys keys_{"sp"};
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
