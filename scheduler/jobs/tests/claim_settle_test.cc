// SettleClaim against a real redis-server and a real JobLedger: what each verdict other than
// "run" does to the entry, and the result it answers with.
#include "scheduler/jobs/claim_settle.h"

#include <gtest/gtest.h>

#include "scheduler/redis/tests/loop_redis_test.h"

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

class SettleClaimTest : public LoopRedisTest {
 protected:
  void SetUp() override {
    config_.consumer = "host-a";
    LoopRedisTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ledger_ = std::make_unique<JobLedger>(base_, cmd_.get(), keys_, config_, nullptr);
    Must({"XGROUP", "CREATE", "q", std::string(Keys::kGroup), "0", "MKSTREAM"});
    ReplyPtr added = Must({"XADD", "q", "*", "id", "j1"});
    ASSERT_NE(added, nullptr);
    entry_ = std::string(added->str, added->len);
    Must({"XREADGROUP", "GROUP", std::string(Keys::kGroup), "host-a", "STREAMS", "q", ">"});
  }
  void TearDown() override {
    ledger_.reset();
    LoopRedisTest::TearDown();
  }
  int64_t Int(const std::vector<std::string>& args) {
    auto r = sync_->Command(args);
    return r.ok() && (*r)->type == REDIS_REPLY_INTEGER ? (*r)->integer : -1;
  }
  int64_t Pending() {
    auto r = sync_->Command({"XPENDING", "q", std::string(Keys::kGroup)});
    return r.ok() ? (*r)->element[0]->integer : -1;
  }

  DaemonConfig config_;
  Keys keys_{"sp"};
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
  EXPECT_FALSE(ledger_->Holds("q", entry_)) << "no longer held: its lease is not renewed";
  for (int i = 0; i < 20; ++i) event_base_loop(base_, EVLOOP_ONCE | EVLOOP_NONBLOCK);
  EXPECT_EQ(Pending(), 1);
  EXPECT_EQ(Int({"XLEN", "q"}), 1);
}

}  // namespace
}  // namespace sandpool
