// JobLedger against a real redis-server on a real event loop: the claims made in one turn of the
// loop go out as one CLAIM call and the results stored in one turn as one FINISH call, each entry
// still getting its own verdict; and results sent while Redis is away wait, and are stored once it
// answers again.
#include "scheduler/jobs/job_ledger.h"

#include <gtest/gtest.h>

#include <event2/event.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "scheduler/jobs/claim_settle.h"
#include "scheduler/redis/scripts.h"
#include "scheduler/redis/tests/loop_redis_test.h"

namespace sandpool {
namespace {

class JobLedgerTest : public LoopRedisTest {
 protected:
  JobLedgerTest() { client_name_ = "sandpool:d1:cmd"; }
  void SetUp() override {
    config_.consumer = "d1";
    config_.result_ttl_s = 600;
    LoopRedisTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ledger_ = std::make_unique<JobLedger>(base_, cmd_.get(), keys_, config_, &metrics_);
    Must({"XGROUP", "CREATE", stream_, "workers", "0", "MKSTREAM"});
  }
  void TearDown() override {
    ledger_.reset();
    LoopRedisTest::TearDown();
  }

  long long EvalCalls() {
    auto r = Must({"INFO", "commandstats"});
    std::string text(r->str, r->len);
    long long n = 0;
    for (const char* key : {"cmdstat_evalsha:calls=", "cmdstat_eval:calls="}) {
      auto k = text.find(key);
      if (k != std::string::npos) n += std::atoll(text.c_str() + k + std::string(key).size());
    }
    return n;
  }

  // Queues a job and reads it as this daemon: its entry id (held by the ledger).
  std::string Queue(const std::string& id) {
    std::string entry = ReplyStr(Must({"XADD", stream_, "*", "id", id}).get());
    Must({"XREADGROUP", "GROUP", "workers", "d1", "COUNT", "1", "STREAMS", stream_, ">"});
    ledger_->Hold(stream_, entry);
    return entry;
  }

  static std::string ReplyStr(const redisReply* r) { return std::string(r->str, r->len); }

  static JobResult Exited(const std::string& id, uint32_t attempt) {
    JobResult r;
    r.id = id;
    r.attempt = attempt;
    r.outcome = Outcome::kExit;
    r.exit_code = 0;
    return r;
  }

  Keys keys_{"sandpool"};
  DaemonConfig config_;
  Metrics metrics_;
  std::unique_ptr<JobLedger> ledger_;
  std::string stream_ = "sandpool:q:default";
};

TEST_F(JobLedgerTest, OneTurnsClaimsAndResultsGoAsOneScriptCallEach) {
  std::vector<std::string> ids = {"j1", "j2", "j3", "j1"};  // j3 has a result; the second j1 is a duplicate
  std::vector<std::string> entries;
  for (const std::string& id : ids) entries.push_back(Queue(id));
  Must({"SET", "sandpool:result:j3", "stored"});
  Must({"CONFIG", "RESETSTAT"});

  std::map<std::string, std::pair<JobLedger::Verdict, uint32_t>> verdicts;  // entry -> verdict
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_TRUE(ledger_->Claim(ids[i], stream_, entries[i], 3, [&verdicts, e = entries[i]](JobLedger::Verdict v, uint32_t a) {
      verdicts[e] = {v, a};
    }));
  }
  ASSERT_TRUE(RunUntil([&] { return verdicts.size() == ids.size(); }));
  EXPECT_EQ(EvalCalls(), 1);
  EXPECT_EQ(verdicts[entries[0]], std::make_pair(JobLedger::Verdict::kRun, 1u));
  EXPECT_EQ(verdicts[entries[1]], std::make_pair(JobLedger::Verdict::kRun, 1u));
  EXPECT_EQ(verdicts[entries[2]].first, JobLedger::Verdict::kDrop);
  EXPECT_EQ(verdicts[entries[3]].first, JobLedger::Verdict::kDrop);

  ledger_->Ack(stream_, entries[2]);
  ledger_->Ack(stream_, entries[3]);
  ledger_->Finish(Exited("j1", 1), stream_, entries[0], 1, "t");
  ledger_->Finish(Exited("j2", 1), stream_, entries[1], 1, "t");
  EXPECT_EQ(ledger_->pending_results(), 2u) << "gathered, not sent yet";
  ASSERT_TRUE(RunUntil([&] { return ledger_->held() == 0; }));
  EXPECT_EQ(EvalCalls(), 2);
  EXPECT_EQ(ledger_->pending_results(), 0u);
  EXPECT_EQ(Must({"EXISTS", "sandpool:result:j1", "sandpool:result:j2"})->integer, 2);
  EXPECT_EQ(Must({"XLEN", stream_})->integer, 0);
  EXPECT_EQ(ReplyStr(Must({"HGET", "sandpool:job:j2", "state"}).get()), "done");
}

TEST_F(JobLedgerTest, ResultsSentWhileRedisIsAwayWaitAndAreStoredWhenItAnswers) {
  std::string e1 = Queue("k1"), e2 = Queue("k2");
  int claimed = 0;
  for (auto [id, e] : {std::pair{"k1", e1}, std::pair{"k2", e2}}) {
    ASSERT_TRUE(ledger_->Claim(id, stream_, e, 3, [&claimed](JobLedger::Verdict v, uint32_t) {
      EXPECT_EQ(v, JobLedger::Verdict::kRun);
      ++claimed;
    }));
  }
  ASSERT_TRUE(RunUntil([&] { return claimed == 2; }));
  // Redis stops running writes: the FINISH call is sent, and its reply is lost with the connection.
  Must({"CLIENT", "PAUSE", "300000", "WRITE"});
  ledger_->Finish(Exited("k1", 1), stream_, e1, 1, "t");
  ledger_->Finish(Exited("k2", 1), stream_, e2, 1, "t");
  ASSERT_TRUE(RunUntil([&] { return cmd_->OldestPendingMs() >= 2; }));
  Must({"CLIENT", "KILL", "USER", "default", "SKIPME", "yes"});
  ASSERT_TRUE(RunUntil([&] { return ledger_->pending_results() == 2; })) << "both results wait for Redis";
  Must({"CLIENT", "UNPAUSE"});
  ASSERT_TRUE(RunUntil([&] { return connects_ > 1 && cmd_->connected(); }));
  ledger_->FlushPending();
  ASSERT_TRUE(RunUntil([&] { return ledger_->held() == 0; }));
  EXPECT_EQ(ledger_->pending_results(), 0u);
  EXPECT_EQ(Must({"EXISTS", "sandpool:result:k1", "sandpool:result:k2"})->integer, 2);
  EXPECT_EQ(Must({"XLEN", stream_})->integer, 0);
}

// A read handed over by SetReadAlong rides in the turn's FINISH call (one script call, no
// XREADGROUP of its own): its reply comes after the results' verdicts, with the entries queued
// behind them, now pending for this consumer. A FINISH whose reply is lost hands over nullptr,
// so the reader scans for what it may have taken.
TEST_F(JobLedgerTest, AReadRidesAlongInTheTurnsFinishCall) {
  std::string e1 = Queue("r1");
  int claimed = 0;
  ASSERT_TRUE(ledger_->Claim("r1", stream_, e1, 3, [&claimed](JobLedger::Verdict, uint32_t) { ++claimed; }));
  ASSERT_TRUE(RunUntil([&] { return claimed == 1; }));
  std::string next = ReplyStr(Must({"XADD", stream_, "*", "id", "r2"}).get());
  int taken = 0;
  std::vector<std::string> read_entries;
  bool lost = false, held_when_read = true;
  ledger_->SetReadAlong(
      [&]() -> std::optional<JobLedger::ReadAlong> {
        ++taken;
        return JobLedger::ReadAlong{{stream_}, 5, static_cast<uint64_t>(taken)};
      },
      [&](const JobLedger::ReadAlong&, redisReply* reply) {
        held_when_read = ledger_->held() > 0;
        if (reply == nullptr) {
          lost = true;
          return;
        }
        ASSERT_EQ(reply->type, REDIS_REPLY_ARRAY);
        const redisReply* entries = reply->element[0]->element[1];
        for (size_t i = 0; i < entries->elements; ++i) read_entries.push_back(ReplyStr(entries->element[i]->element[0]));
      });
  Must({"CONFIG", "RESETSTAT"});
  ledger_->Finish(Exited("r1", 1), stream_, e1, 1, "t");
  ASSERT_TRUE(RunUntil([&] { return !read_entries.empty(); }));
  EXPECT_EQ(taken, 1);
  EXPECT_FALSE(held_when_read) << "the results' verdicts are taken first";
  EXPECT_EQ(read_entries, std::vector<std::string>{next});
  EXPECT_EQ(EvalCalls(), 1);
  auto pending = Must({"XPENDING", stream_, "workers", "-", "+", "10", "d1"});
  ASSERT_EQ(pending->elements, 1u);
  EXPECT_EQ(ReplyStr(pending->element[0]->element[0]), next);

  // The reply lost with the connection: the read is handed back as nullptr.
  ledger_->Hold(stream_, next);
  Must({"CLIENT", "PAUSE", "300000", "WRITE"});
  ledger_->Finish(Exited("r2", 1), stream_, next, 1, "t");
  ASSERT_TRUE(RunUntil([&] { return cmd_->OldestPendingMs() >= 2; }));
  Must({"CLIENT", "KILL", "USER", "default", "SKIPME", "yes"});
  ASSERT_TRUE(RunUntil([&] { return lost; }));
  EXPECT_EQ(taken, 2);
  Must({"CLIENT", "UNPAUSE"});
}

// A claim Redis refuses again and again (the job's hash key holds a string: its state cannot be
// read) is given up after kMaxClaimErrors refusals in a row: kFailed, and the error result its
// caller stores goes by REJECT (FINISH would read the same hash), so the entry ends: its result
// is stored, its exited event published, and it leaves the stream. A refusal between successes
// does not count toward the limit.
TEST_F(JobLedgerTest, AClaimRefusedAgainAndAgainEndsWithAnErrorResult) {
  std::string entry = Queue("f1");
  Must({"SET", "sandpool:job:f1", "not a hash"});
  std::vector<JobLedger::Verdict> verdicts;
  for (int i = 0; i < JobLedger::kMaxClaimErrors; ++i) {
    size_t before = verdicts.size();
    ASSERT_TRUE(ledger_->Claim("f1", stream_, entry, 3, [&](JobLedger::Verdict v, uint32_t) { verdicts.push_back(v); }));
    ASSERT_TRUE(RunUntil([&] { return verdicts.size() > before; }));
  }
  std::vector<JobLedger::Verdict> want(JobLedger::kMaxClaimErrors - 1, JobLedger::Verdict::kUnknown);
  want.push_back(JobLedger::Verdict::kFailed);
  EXPECT_EQ(verdicts, want);
  bool answered = false;
  SettleClaim(ledger_.get(), verdicts.back(), stream_, entry, "", [&](JobError e) {
    answered = true;
    EXPECT_EQ(e.code, ErrorCode::kInternal);
    ledger_->Finish(ErrorResult("f1", 0, std::move(e)), stream_, entry, 0, "t");
  });
  EXPECT_TRUE(answered);
  ASSERT_TRUE(RunUntil([&] { return Must({"EXISTS", "sandpool:result:f1"})->integer == 1; }));
  auto stored = DecodeResult(ReplyStr(Must({"GET", "sandpool:result:f1"}).get()));
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->outcome, Outcome::kError);
  ASSERT_TRUE(stored->error.has_value());
  EXPECT_EQ(stored->error->code, ErrorCode::kInternal);
  ASSERT_TRUE(RunUntil([&] { return Must({"XLEN", stream_})->integer == 0; })) << "the entry left the stream";
  EXPECT_EQ(ReplyStr(Must({"GET", "sandpool:job:f1"}).get()), "not a hash") << "REJECT reads and writes no job hash";

  // Refusals with a claim that went through between them start the count again.
  std::string other = Queue("f2");
  auto claim = [&](const std::string& id, const std::string& e) {
    JobLedger::Verdict got = JobLedger::Verdict::kRun;
    bool done = false;
    EXPECT_TRUE(ledger_->Claim(id, stream_, e, 3, [&](JobLedger::Verdict v, uint32_t) {
      got = v;
      done = true;
    }));
    EXPECT_TRUE(RunUntil([&] { return done; }));
    return got;
  };
  Must({"SET", "sandpool:job:f2", "not a hash"});
  for (int i = 0; i < JobLedger::kMaxClaimErrors - 1; ++i) EXPECT_EQ(claim("f2", other), JobLedger::Verdict::kUnknown);
  Must({"DEL", "sandpool:job:f2"});
  EXPECT_EQ(claim("f2", other), JobLedger::Verdict::kRun);
  Must({"DEL", "sandpool:job:f2"});
  Must({"SET", "sandpool:job:f2", "not a hash"});
  EXPECT_EQ(claim("f2", other), JobLedger::Verdict::kUnknown) << "the count started again";
}

// A claim that fails in Redis (here the script's own error: the job's hash key holds a string)
// leaves its entry pending and unsure: the own-pending scan of its stream is asked for at the
// next heartbeats, a bounded number of times, and no more once the entry is claimed again.
TEST_F(JobLedgerTest, AnUnsureClaimAsksForItsStreamToBeScannedAgain) {
  std::string entry = Queue("u1");
  Must({"SET", "sandpool:job:u1", "not a hash"});
  JobLedger::Verdict verdict = JobLedger::Verdict::kRun;
  bool done = false;
  ASSERT_TRUE(ledger_->Claim("u1", stream_, entry, 3, [&](JobLedger::Verdict v, uint32_t) {
    verdict = v;
    done = true;
  }));
  ASSERT_TRUE(RunUntil([&] { return done; }));
  EXPECT_EQ(verdict, JobLedger::Verdict::kUnknown);
  EXPECT_FALSE(ledger_->TakeRescan("sandpool:q:other"));
  for (int i = 0; i < JobLedger::kMaxRescans; ++i) ASSERT_TRUE(ledger_->TakeRescan(stream_)) << i;
  EXPECT_FALSE(ledger_->TakeRescan(stream_)) << "bounded: after that, the next reconnect scans";
  // Found again and claimed (as the same attempt): no more scans for it.
  Must({"DEL", "sandpool:job:u1"});
  std::string again = Queue("u2");
  Must({"SET", "sandpool:job:u2", "not a hash"});
  done = false;
  ASSERT_TRUE(ledger_->Claim("u2", stream_, again, 3, [&](JobLedger::Verdict, uint32_t) { done = true; }));
  ASSERT_TRUE(RunUntil([&] { return done; }));
  ASSERT_TRUE(ledger_->TakeRescan(stream_));
  Must({"DEL", "sandpool:job:u2"});
  done = false;
  ASSERT_TRUE(ledger_->Claim("u2", stream_, again, 3, [&](JobLedger::Verdict v, uint32_t) {
    verdict = v;
    done = true;
  }));
  ASSERT_TRUE(RunUntil([&] { return done; }));
  EXPECT_EQ(verdict, JobLedger::Verdict::kRun);
  EXPECT_FALSE(ledger_->TakeRescan(stream_));
}

// Redis numbers each stream apart, so the queue and a session stream often hold an entry of the
// same id (the first of a millisecond is <ms>-0 in both). The ledger holds them apart: a session
// operation that ends must not take a job's hold with it, or the job's claim, answered "run"
// meanwhile, would be dropped (acked without a result: the job lost). Leases lost are named by
// stream and id too.
TEST_F(JobLedgerTest, EntriesOfOneIdInTwoStreamsAreHeldApart) {
  const std::string own = "sandpool:session:default:d1";
  Must({"XGROUP", "CREATE", own, "workers", "0", "MKSTREAM"});
  Must({"XADD", stream_, "5-0", "id", "j5"});
  Must({"XADD", own, "5-0", "id", "op5"});
  Must({"XREADGROUP", "GROUP", "workers", "d1", "STREAMS", stream_, own, ">", ">"});
  ledger_->Hold(own, "5-0");
  // The operation's result goes out, then the job is read and claimed before its reply comes.
  ledger_->FinishEncoded("op5", 1, "\x80", "event", own, "5-0");
  ledger_->Flush();
  ledger_->Hold(stream_, "5-0");
  bool held_when_claimed = false, claimed = false;
  ASSERT_TRUE(ledger_->Claim("j5", stream_, "5-0", 3, [&](JobLedger::Verdict v, uint32_t) {
    EXPECT_EQ(v, JobLedger::Verdict::kRun);
    held_when_claimed = ledger_->Holds(stream_, "5-0");
    claimed = true;
  }));
  ASSERT_TRUE(RunUntil([&] { return claimed && !ledger_->Holds(own, "5-0"); }));
  EXPECT_TRUE(held_when_claimed) << "the operation's end took the job's hold";
  EXPECT_TRUE(ledger_->Holds(stream_, "5-0"));
  // Ack and Drop name one stream's entry only.
  ledger_->Hold(own, "5-0");
  ledger_->Drop(own, "5-0");
  EXPECT_TRUE(ledger_->Holds(stream_, "5-0"));
  // Another daemon takes the session stream's 5-0 over: only that entry is lost here.
  Must({"XADD", own, "6-0", "id", "op6"});
  Must({"XREADGROUP", "GROUP", "workers", "d1", "STREAMS", own, ">"});
  ledger_->Hold(own, "6-0");
  Must({"XCLAIM", own, "workers", "d2", "0", "6-0", "JUSTID"});
  std::vector<std::pair<std::string, std::string>> lost;
  bool refreshed = false;
  ledger_->RefreshLeases([&](const std::string& stream, const std::string& entry) { lost.emplace_back(stream, entry); });
  cmd_->Command({"PING"}, [&](redisReply*) { refreshed = true; });
  ASSERT_TRUE(RunUntil([&] { return refreshed; }));
  EXPECT_EQ(lost, (std::vector<std::pair<std::string, std::string>>{{own, "6-0"}}));
}

}  // namespace
}  // namespace sandpool
