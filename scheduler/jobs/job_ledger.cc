#include "scheduler/jobs/job_ledger.h"

#include <memory>

#include "common/clock.h"
#include "common/log.h"
#include "scheduler/jobs/intake.h"
#include "scheduler/redis/scripts.h"

namespace sandpool {
namespace {

// Dead letters keep the start of the raw payload only, and the stream is capped, so that bad
// input cannot fill Redis: at most kDeadLetters entries of about kDeadRaw bytes each.
constexpr size_t kDeadRaw = 4 << 10;
constexpr size_t kDeadLetters = 1000;

}  // namespace

NotifySummary NotifySummary::Of(const JobResult& r) {
  NotifySummary s;
  s.outcome = std::string(OutcomeName(r.outcome));
  if (r.exit_code) s.exit_code = std::to_string(*r.exit_code);
  if (r.error) s.error = std::string(ErrorCodeName(r.error->code));
  return s;
}

JobLedger::JobLedger(struct event_base* base, RedisAsync* cmd, const Keys& keys, const DaemonConfig& config,
                     Metrics* metrics)
    : cmd_(cmd), hold_timer_(evtimer_new(base, &JobLedger::OnHoldTimer, this)), keys_(keys), config_(config),
      metrics_(metrics) {}

JobLedger::~JobLedger() { event_free(hold_timer_); }

bool JobLedger::Claim(const std::string& job_id, const std::string& stream, const std::string& entry,
                      uint32_t max_attempts, std::function<void(Verdict, uint32_t)> done) {
  (void)stream;
  bool retry_own = unsure_claims_.erase(entry) > 0;
  auto held = held_.find(entry);
  std::string notify = held != held_.end() ? held->second.notify : "";
  return cmd_->Eval(kClaimScript,
      {"2", keys_.Job(job_id), keys_.Result(job_id), entry, config_.consumer,
       std::to_string(WallMs()), std::to_string(config_.result_ttl_s), std::to_string(max_attempts),
       retry_own ? "1" : "0", notify, keys_.prefix(), job_id},
      [this, done = std::move(done), entry, job_id](redisReply* r) {
        if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
          if (r != nullptr) LogWarn("claim failed", {{"job", job_id}, {"error", ReplyString(r)}});
          unsure_claims_.insert(entry);
          done(Verdict::kUnknown, 0);
          return;
        }
        std::string verdict = ReplyString(r->element[0]);
        auto attempt = static_cast<uint32_t>(std::strtoul(ReplyString(r->element[1]).c_str(), nullptr, 10));
        if (verdict == "run") done(Verdict::kRun, attempt);
        else if (verdict == "cancelled") done(Verdict::kCancelled, attempt);
        else if (verdict == "lost") done(Verdict::kLost, attempt);
        else done(Verdict::kDrop, attempt);  // "dup", "done"
      });
}

void JobLedger::Finish(JobResult result, const std::string& stream, const std::string& entry, uint64_t seq,
                       std::string_view template_name) {
  result.worker = config_.consumer;
  LogDebug("job finished", {{"job", result.id}, {"outcome", std::string(OutcomeName(result.outcome))}});
  metrics_->JobCompleted(template_name, OutcomeName(result.outcome));
  PendingFinish f;
  f.job_id = result.id;
  f.stream = stream;
  f.entry = entry;
  f.attempt = std::to_string(result.attempt);
  f.event = EncodeExitedEvent(seq, result);
  f.result = EncodeResult(result);
  if (auto held = held_events_.find(result.id); held != held_events_.end()) {
    f.live = std::move(held->second);
    held_events_.erase(held);
  }
  f.summary = NotifySummary::Of(result);
  SendFinish(std::move(f));
}

void JobLedger::FinishEncoded(const std::string& id, uint32_t attempt, std::string result, std::string event,
                              const std::string& stream, const std::string& entry) {
  SendFinish(PendingFinish{id, stream, entry, std::to_string(attempt), std::move(result), std::move(event), {}});
}

void JobLedger::SendFinish(PendingFinish f) {
  std::vector<std::string> args = {"4", keys_.Job(f.job_id), keys_.Result(f.job_id), f.stream,
                                   keys_.Out(f.job_id), f.entry, config_.consumer, f.attempt, f.result,
                                   std::to_string(config_.result_ttl_s), f.event, std::string(Keys::kGroup),
                                   keys_.prefix(), f.job_id, f.summary.outcome, f.summary.exit_code,
                                   f.summary.error, std::to_string(f.live.size())};
  args.insert(args.end(), f.live.begin(), f.live.end());
  // Sent again after a lost connection: live events are at most once, so they do not wait.
  f.live.clear();
  auto shared = std::make_shared<PendingFinish>(std::move(f));
  bool sent = cmd_->Eval(kFinishScript, std::move(args), [this, shared](redisReply* r) {
    if (r == nullptr) {
      // Lost with the connection: unknown whether it ran; running it again is harmless
      // (the script is idempotent for the same consumer and attempt).
      pending_.push_back(std::move(*shared));
      return;
    }
    std::string verdict = ReplyString(r);
    if (r->type == REDIS_REPLY_ERROR) {
      LogError("storing a result failed", {{"job", shared->job_id}, {"error", verdict}});
      pending_.push_back(std::move(*shared));
      return;
    }
    if (verdict == "dup") Ack(shared->stream, shared->entry);
    if (verdict == "fenced") LogWarn("result discarded: another daemon took the job over", {{"job", shared->job_id}});
    held_.erase(shared->entry);
  });
  if (!sent) pending_.push_back(std::move(*shared));
}

void JobLedger::FlushPending() {
  std::deque<PendingFinish> waiting;
  waiting.swap(pending_);
  for (PendingFinish& f : waiting) SendFinish(std::move(f));
}

void JobLedger::Reject(const std::string& job_id, const std::string& stream, const std::string& entry,
                       ErrorCode code, std::string message, const std::map<std::string, std::string>& fields,
                       bool dead_letter) {
  LogInfo("job rejected", {{"job", job_id}, {"code", std::string(ErrorCodeName(code))}, {"error", message}});
  metrics_->JobRejected(ErrorCodeName(code));
  metrics_->JobCompleted(Metrics::kOtherTemplate, OutcomeName(Outcome::kError));
  if (dead_letter) {
    metrics_->DeadLetter(ErrorCodeName(code));
    auto job = fields.find("job");
    std::string raw = job == fields.end() ? std::string() : job->second.substr(0, kDeadRaw);
    size_t raw_bytes = job == fields.end() ? 0 : job->second.size();
    cmd_->Command({"XADD", keys_.Dead(), "MAXLEN", "~", std::to_string(kDeadLetters), "*", "entry", entry, "id", job_id,
                   "reason", std::string(ErrorCodeName(code)), "message", message.substr(0, 1024), "raw", raw,
                   "raw_bytes", std::to_string(raw_bytes)},
                  [](redisReply*) {});
  }
  JobResult r;
  r.id = job_id;
  r.outcome = Outcome::kError;
  r.attempt = 0;  // it never ran
  r.worker = config_.consumer;
  r.error = JobError{code, std::move(message)};
  Answer(job_id, stream, entry, EncodeResult(r), EncodeExitedEvent(0, r), NotifyTargetOf(fields), NotifySummary::Of(r));
}

void JobLedger::Answer(const std::string& id, const std::string& stream, const std::string& entry,
                       const std::string& result, const std::string& event, const std::string& notify,
                       const NotifySummary& summary) {
  // One that cannot be stored now is found again by the own-pending scan.
  bool sent = cmd_->Eval(kRejectScript, {"3", keys_.Result(id), stream, keys_.Out(id), entry, result,
                             std::to_string(config_.result_ttl_s), event, std::string(Keys::kGroup),
                             keys_.prefix(), notify, id, summary.outcome, summary.exit_code, summary.error},
                            [this, entry](redisReply* reply) {
                              if (reply != nullptr && reply->type != REDIS_REPLY_ERROR) held_.erase(entry);
                            });
  if (!sent) held_.erase(entry);
}

void JobLedger::Ack(const std::string& stream, const std::string& entry) {
  held_.erase(entry);
  cmd_->Command({"XACK", stream, std::string(Keys::kGroup), entry}, [](redisReply*) {});
  cmd_->Command({"XDEL", stream, entry}, [](redisReply*) {});
}

void JobLedger::Forward(const std::string& job_id, const std::string& stream, const std::string& entry,
                        const std::string& to) {
  held_.erase(entry);
  cmd_->Eval(kForwardScript, {"3", stream, to, keys_.Job(job_id), entry, std::string(Keys::kGroup)},
                [](redisReply*) {});
}

void JobLedger::Publish(const std::string& job_id, std::string event) {
  held_events_[job_id].push_back(std::move(event));
  if (!evtimer_pending(hold_timer_, nullptr)) {
    struct timeval tv = {0, kEventHoldMs * 1000};
    evtimer_add(hold_timer_, &tv);
  }
}

void JobLedger::OnHoldTimer(evutil_socket_t, short, void* arg) { static_cast<JobLedger*>(arg)->FlushHeld(); }

void JobLedger::FlushHeld() {
  std::map<std::string, std::vector<std::string>> held;
  held.swap(held_events_);
  for (auto& [job_id, events] : held) {
    for (std::string& e : events) PublishNow(job_id, std::move(e));
  }
}

void JobLedger::PublishNow(const std::string& job_id, std::string event) {
  // At-most-once by design (PROTOCOL.md section 6): dropped while Redis is away.
  cmd_->Command({"PUBLISH", keys_.Out(job_id), std::move(event)}, [](redisReply*) {});
}

void JobLedger::CancelQueued(const std::string& job_id) {
  JobResult r;
  r.id = job_id;
  r.outcome = Outcome::kCancelled;
  r.attempt = 0;
  r.worker = config_.consumer;
  r.error = JobError{ErrorCode::kCancelled, "cancelled by a client before it started"};
  cmd_->Eval(kCancelQueuedScript, {"3", keys_.Job(job_id), keys_.Result(job_id), keys_.Out(job_id),
                 EncodeResult(r), std::to_string(config_.result_ttl_s), EncodeExitedEvent(0, r), config_.consumer},
                [this, job_id](redisReply* reply) {
                  if (ReplyString(reply) == "ok") {
                    LogInfo("queued job cancelled", {{"job", job_id}});
                    metrics_->JobCompleted(Metrics::kOtherTemplate, OutcomeName(Outcome::kCancelled));
                  }
                });
}

void JobLedger::CheckCancels(const std::vector<std::string>& job_ids, std::function<void(const std::string&)> cancelled) {
  if (job_ids.empty()) return;
  std::vector<std::string> args = {std::to_string(job_ids.size())};
  for (const std::string& id : job_ids) args.push_back(keys_.Job(id));
  cmd_->Eval(kCancelFlagsScript, std::move(args), [job_ids, cancelled = std::move(cancelled)](redisReply* r) {
    if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return;
    for (size_t i = 0; i < r->elements; ++i) {
      long long k = r->element[i]->integer;
      if (k >= 1 && static_cast<size_t>(k) <= job_ids.size()) cancelled(job_ids[static_cast<size_t>(k - 1)]);
    }
  });
}

void JobLedger::RefreshLeases(std::function<void(const std::string&)> lost) {
  if (held_.empty()) return;
  std::vector<std::string> keys, ids;
  for (const auto& [entry, held] : held_) {
    keys.push_back(held.stream);
    ids.push_back(entry);
  }
  std::vector<std::string> args = {std::to_string(keys.size())};
  args.insert(args.end(), keys.begin(), keys.end());
  args.push_back(config_.consumer);
  args.push_back(std::string(Keys::kGroup));
  args.insert(args.end(), ids.begin(), ids.end());
  cmd_->Eval(kRefreshScript, std::move(args), [this, lost = std::move(lost)](redisReply* r) {
    if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return;
    for (size_t i = 0; i < r->elements; ++i) {
      std::string entry = ReplyString(r->element[i]);
      // Finished meanwhile (our own FINISH acked it): not a loss.
      if (held_.count(entry) == 0) continue;
      lost(entry);
    }
  });
}

}  // namespace sandpool
