// SettleClaim against a real redis-server and a real JobLedger: what each verdict other than
// "run" does to the entry, and the result it answers with.
#include "scheduler/jobs/claim_settle.h"

#include <event2/event.h>
#include <gtest/gtest.h>

#include "common/clock.h"
#include "scheduler/redis/scripts.h"
#include "tests/support/redis_server.h"

namespace sandpool {
namespace {

TEST(ErrorResult, OutcomeFollowsTheCode) {
  EXPECT_EQ(ErrorResult("a", 2, JobError{ErrorCode::kCancelled, "x"}).outcome, Outcome::kCancelled);
  EXPECT_EQ(ErrorResult("a", 2, JobError{ErrorCode::kWorkerLost, "x"}).outcome, Outcome::kWorkerLost);
  JobResult r = ErrorResult("a", 2, JobError{ErrorCode::kInternal, "x"});
  EXPECT_EQ(r.outcome, Outcome::kError);
  EXPECT_EQ(r.id, "a");
  EXPECT_EQ(r.attempt, 2u);
  ASSERT_TRUE(r.error.has_value());
  EXPECT_EQ(r.error->message, "x");
}

class SettleClaimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!server_.Start()) GTEST_SKIP() << "redis-server not available";
    sync_ = MustConnect(server_.UnixUrl());
    ASSERT_NE(sync_, nullptr);
    base_ = event_base_new();
    config_.consumer = "host-a";
    cmd_ = std::make_unique<RedisAsync>(base_, server_.UnixUrl(), "test", RedisAsync::Hooks{});
    cmd_->PreloadScripts(AllScripts());
    cmd_->Connect();
    ASSERT_TRUE(RunUntil([&] { return cmd_->connected(); }));
    ledger_ = std::make_unique<JobLedger>(base_, cmd_.get(), keys_, config_, nullptr);
    ASSERT_TRUE(sync_->Command({"XGROUP", "CREATE", "q", std::string(Keys::kGroup), "0", "MKSTREAM"}).ok());
    auto added = sync_->Command({"XADD", "q", "*", "id", "j1"});
    ASSERT_TRUE(added.ok());
    entry_ = std::string((*added)->str, (*added)->len);
    ASSERT_TRUE(sync_->Command({"XREADGROUP", "GROUP", std::string(Keys::kGroup), "host-a", "STREAMS", "q", ">"}).ok());
  }
  void TearDown() override {
    ledger_.reset();
    cmd_.reset();
    if (base_) event_base_free(base_);
  }
  template <typename F>
  bool RunUntil(F done) {
    int64_t deadline = MonotonicUs() + 10'000'000;
    while (!done()) {
      if (MonotonicUs() > deadline) return false;
      event_base_loop(base_, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    }
    return true;
  }
  int64_t Int(const std::vector<std::string>& args) {
    auto r = sync_->Command(args);
    return r.ok() && (*r)->type == REDIS_REPLY_INTEGER ? (*r)->integer : -1;
  }
  int64_t Pending() {
    auto r = sync_->Command({"XPENDING", "q", std::string(Keys::kGroup)});
    return r.ok() ? (*r)->element[0]->integer : -1;
  }

  TestRedisServer server_;
  std::unique_ptr<SyncRedis> sync_;
  struct event_base* base_ = nullptr;
  DaemonConfig config_;
  Keys keys_{"sp"};
  std::unique_ptr<RedisAsync> cmd_;
  std::unique_ptr<JobLedger> ledger_;
  std::string entry_;
};

TEST_F(SettleClaimTest, CancelledAndLostAreAnsweredWithTheirError) {
  std::vector<JobError> answered;
  auto answer = [&](JobError e) { answered.push_back(std::move(e)); };
  SettleClaim(ledger_.get(), JobLedger::Verdict::kCancelled, "q", entry_, "lost!", answer);
  SettleClaim(ledger_.get(), JobLedger::Verdict::kLost, "q", entry_, "lost!", answer);
  ASSERT_EQ(answered.size(), 2u);
  EXPECT_EQ(answered[0].code, ErrorCode::kCancelled);
  EXPECT_EQ(answered[1].code, ErrorCode::kWorkerLost);
  EXPECT_EQ(answered[1].message, "lost!");
  EXPECT_EQ(Pending(), 1) << "answering is the caller's: the entry is untouched here";
}

TEST_F(SettleClaimTest, ADropIsAckedAndDeletedWithoutAnAnswer) {
  bool answered = false;
  SettleClaim(ledger_.get(), JobLedger::Verdict::kDrop, "q", entry_, "", [&](JobError) { answered = true; });
  ASSERT_TRUE(RunUntil([&] { return Pending() == 0 && Int({"XLEN", "q"}) == 0; }));
  EXPECT_FALSE(answered);
}

TEST_F(SettleClaimTest, AnUnknownClaimLeavesTheEntryPendingForTheOwnScan) {
  ledger_->Hold("q", entry_);
  bool answered = false;
  SettleClaim(ledger_.get(), JobLedger::Verdict::kUnknown, "q", entry_, "", [&](JobError) { answered = true; });
  EXPECT_FALSE(answered);
  EXPECT_FALSE(ledger_->Holds(entry_)) << "no longer held: its lease is not renewed";
  for (int i = 0; i < 20; ++i) event_base_loop(base_, EVLOOP_ONCE | EVLOOP_NONBLOCK);
  EXPECT_EQ(Pending(), 1);
  EXPECT_EQ(Int({"XLEN", "q"}), 1);
}

}  // namespace
}  // namespace sandpool
