#include "scheduler/jobs/job_ledger.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
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
    : cmd_(cmd), hold_timer_(evtimer_new(base, &JobLedger::OnHoldTimer, this)),
      flush_event_(event_new(base, -1, 0, &JobLedger::OnFlush, this)), keys_(keys), config_(config),
      metrics_(metrics) {}

JobLedger::~JobLedger() {
  event_free(flush_event_);
  event_free(hold_timer_);
}

bool JobLedger::Claim(const std::string& job_id, const std::string& stream, const std::string& entry,
                      uint32_t max_attempts, std::function<void(Verdict, uint32_t)> done) {
  if (!cmd_->connected()) return false;
  bool retry_own = unsure_claims_.erase({stream, entry}) > 0;
  auto held = held_.find({stream, entry});
  std::string notify = held != held_.end() ? held->second : "";
  claims_.push_back(PendingClaim{job_id, stream, entry, std::move(notify), max_attempts, retry_own, std::move(done)});
  ScheduleFlush();
  return true;
}

// Active events run after the callbacks already due in this turn of the loop (libevent runs its
// active queue in order), so one XREADGROUP reply's entries, or the exits seen in one turn, end
// up in one batch without waiting for a timer.
void JobLedger::ScheduleFlush() {
  event_active(flush_event_, EV_TIMEOUT, 1);  // once: an active event is not queued again
}

void JobLedger::OnFlush(evutil_socket_t, short, void* arg) {
  static_cast<JobLedger*>(arg)->Flush();
}

void JobLedger::FlushClaims() {
  std::vector<PendingClaim> gathered;
  gathered.swap(claims_);
  for (size_t i = 0; i < gathered.size(); i += kMaxBatch) {
    size_t end = std::min(gathered.size(), i + kMaxBatch);
    SendClaims(std::vector<PendingClaim>(std::make_move_iterator(gathered.begin() + static_cast<long>(i)),
                                         std::make_move_iterator(gathered.begin() + static_cast<long>(end))));
  }
}

void JobLedger::SendClaims(std::vector<PendingClaim> batch) {
  std::vector<std::string> args = {std::to_string(2 * batch.size())};
  args.reserve(1 + 2 * batch.size() + 4 + 5 * batch.size());
  for (const PendingClaim& c : batch) {
    args.push_back(keys_.Job(c.job_id));
    args.push_back(keys_.Result(c.job_id));
  }
  args.insert(args.end(), {config_.consumer, std::to_string(WallMs()), std::to_string(config_.result_ttl_s),
                           keys_.prefix()});
  for (const PendingClaim& c : batch) {
    args.insert(args.end(), {c.entry, std::to_string(c.max_attempts), c.retry_own ? "1" : "0", c.notify, c.job_id});
  }
  auto shared = std::make_shared<std::vector<PendingClaim>>(std::move(batch));
  bool sent = cmd_->Eval(kClaimScript, std::move(args), [this, shared](redisReply* r) {
    bool whole = r != nullptr && r->type == REDIS_REPLY_ARRAY && r->elements == 2 * shared->size();
    if (r != nullptr && !whole) {
      LogWarn("claim failed", {{"jobs", static_cast<uint64_t>(shared->size())}, {"error", ReplyString(r)}});
    }
    for (size_t i = 0; i < shared->size(); ++i) {
      PendingClaim& c = (*shared)[i];
      std::string verdict = whole ? ReplyString(r->element[2 * i]) : "";
      Entry e{c.stream, c.entry};
      if (verdict.empty() || verdict == "error") {
        // Whether it happened is unknown: claimed again as the same attempt (and scanned for
        // again, also after a kFailed, in case storing its answer fails too).
        unsure_claims_.emplace(e, 0);
        if (verdict == "error") {
          LogWarn("claim failed", {{"job", c.job_id}, {"error", ReplyString(r->element[2 * i + 1])}});
          if (++claim_errors_[e] >= kMaxClaimErrors) {
            claim_errors_.erase(e);
            failed_claims_[e] = c.notify;
            c.done(Verdict::kFailed, 0);
            continue;
          }
        }
        c.done(Verdict::kUnknown, 0);
        continue;
      }
      claim_errors_.erase(e);
      auto attempt = static_cast<uint32_t>(std::strtoul(ReplyString(r->element[2 * i + 1]).c_str(), nullptr, 10));
      if (verdict == "run") c.done(Verdict::kRun, attempt);
      else if (verdict == "cancelled") c.done(Verdict::kCancelled, attempt);
      else if (verdict == "lost") c.done(Verdict::kLost, attempt);
      else c.done(Verdict::kDrop, attempt);  // "dup", "done"
    }
  });
  if (!sent) {
    // Never reached Redis (the connection went since Claim): as if Claim had returned false,
    // except that the caller hears it through `done`; the entry stays pending.
    for (PendingClaim& c : *shared) c.done(Verdict::kUnknown, 0);
  }
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
  if (auto failed = failed_claims_.find({f.stream, f.entry}); failed != failed_claims_.end()) {
    // Its claim was given up (kFailed): the job hash FINISH reads is what Redis refused.
    std::string notify = std::move(failed->second);
    failed_claims_.erase(failed);
    Answer(f.job_id, f.stream, f.entry, f.result, f.event, notify, f.summary);
    return;
  }
  finishes_.push_back(std::move(f));
  ScheduleFlush();
}

void JobLedger::FlushFinishes() {
  std::vector<PendingFinish> gathered;
  gathered.swap(finishes_);
  std::vector<PendingFinish> batch;
  size_t bytes = 0;
  for (PendingFinish& f : gathered) {
    size_t size = f.result.size() + f.event.size();
    for (const std::string& e : f.live) size += e.size();
    if (!batch.empty() && (batch.size() == kMaxBatch || bytes + size > kMaxBatchBytes)) {
      SendFinishes(std::move(batch));
      batch.clear();
      bytes = 0;
    }
    bytes += size;
    batch.push_back(std::move(f));
  }
  if (!batch.empty()) SendFinishes(std::move(batch));
}

void JobLedger::SendFinishes(std::vector<PendingFinish> batch) {
  std::optional<ReadAlong> along = take_read_ ? take_read_() : std::nullopt;
  size_t reads = along ? along->streams.size() : 0;
  std::vector<std::string> args = {std::to_string(4 * batch.size() + reads)};
  for (const PendingFinish& f : batch) {
    args.insert(args.end(), {keys_.Job(f.job_id), keys_.Result(f.job_id), f.stream, keys_.Out(f.job_id)});
  }
  if (along) args.insert(args.end(), along->streams.begin(), along->streams.end());
  args.insert(args.end(), {config_.consumer, std::to_string(config_.result_ttl_s), std::string(Keys::kGroup),
                           keys_.prefix(), along ? std::to_string(along->count) : "0", std::to_string(reads)});
  for (PendingFinish& f : batch) {
    if (f.staged()) {
      // Staged (scripts.h, FINISH): the bytes go to Redis as plain commands, ahead of the script
      // on this connection, so they never become Lua strings (which Redis hashes byte by byte:
      // about 2 ms per MiB here, twice per result with its exited event).
      std::string stage = keys_.Stage(f.job_id, config_.consumer, f.attempt);
      for (std::string& e : f.live) PublishNow(f.job_id, std::move(e));
      cmd_->CommandOf({"SET", stage, f.result, "PX", std::to_string(kStageTtlMs)}, [](redisReply*) {});
      args.insert(args.end(), {f.entry, f.attempt, "", "", f.job_id, f.summary.outcome, f.summary.exit_code,
                               f.summary.error, std::move(stage), "0"});
    } else {
      args.insert(args.end(), {f.entry, f.attempt, f.result, f.event, f.job_id, f.summary.outcome,
                               f.summary.exit_code, f.summary.error, "", std::to_string(f.live.size())});
      args.insert(args.end(), std::make_move_iterator(f.live.begin()), std::make_move_iterator(f.live.end()));
    }
    // Sent again after a lost connection: live events are at most once, so they do not wait.
    f.live.clear();
  }
  auto shared = std::make_shared<std::vector<PendingFinish>>(std::move(batch));
  bool sent = cmd_->Eval(kFinishScript, std::move(args), [this, shared, along](redisReply* r) {
    auto read_done = [&](redisReply* reply) {
      if (along) read_done_(*along, reply);
    };
    if (r == nullptr) {
      // Lost with the connection: unknown whether it ran; running it again is harmless
      // (the script is idempotent for the same consumer and attempt).
      for (PendingFinish& f : *shared) pending_.push_back(std::move(f));
      read_done(nullptr);
      return;
    }
    size_t want = shared->size() + (along ? 1 : 0);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != want) {
      LogError("storing results failed", {{"jobs", static_cast<uint64_t>(shared->size())}, {"error", ReplyString(r)}});
      for (PendingFinish& f : *shared) pending_.push_back(std::move(f));
      read_done(nullptr);
      return;
    }
    for (size_t i = 0; i < shared->size(); ++i) TakeFinishVerdict((*shared)[i], r->element[i]);
    read_done(along ? r->element[shared->size()] : nullptr);
  });
  if (!sent) {
    for (PendingFinish& f : *shared) pending_.push_back(std::move(f));
    if (along) read_done_(*along, nullptr);
  }
}

void JobLedger::TakeFinishVerdict(PendingFinish& f, const redisReply* reply) {
  std::string verdict = ReplyString(reply);
  // A staged result's exited event: published now that the result is stored (as the script
  // publishes the others), and only then.
  if (verdict == "ok" && f.staged()) PublishNow(f.job_id, std::move(f.event));
  if (verdict == "ok" || verdict == "dup" || verdict == "fenced") {
    if (verdict == "dup") Ack(f.stream, f.entry);
    if (verdict == "fenced") LogWarn("result discarded: another daemon took the job over", {{"job", f.job_id}});
    held_.erase({f.stream, f.entry});
    return;
  }
  // This entry failed in Redis (its error, caught by the script): kept, sent again.
  LogError("storing a result failed", {{"job", f.job_id}, {"error", verdict}});
  pending_.push_back(std::move(f));
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
                            [this, stream, entry](redisReply* reply) {
                              if (reply != nullptr && reply->type != REDIS_REPLY_ERROR) held_.erase({stream, entry});
                            });
  if (!sent) held_.erase({stream, entry});
}

void JobLedger::Ack(const std::string& stream, const std::string& entry) {
  held_.erase({stream, entry});
  cmd_->Command({"XACK", stream, std::string(Keys::kGroup), entry}, [](redisReply*) {});
  cmd_->Command({"XDEL", stream, entry}, [](redisReply*) {});
}

void JobLedger::Forward(const std::string& job_id, const std::string& stream, const std::string& entry,
                        const std::string& to, std::function<void(const std::string& moved)> moved) {
  held_.erase({stream, entry});
  cmd_->Eval(kForwardScript, {"3", stream, to, keys_.Job(job_id), entry, std::string(Keys::kGroup)},
             [moved = std::move(moved)](redisReply* reply) {
               bool ok = reply != nullptr && reply->type == REDIS_REPLY_STRING;
               moved(ok ? std::string(reply->str, reply->len) : std::string());
             });
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
  // Claims gathered this turn go first, as they did when each was sent at once (a claim then
  // finds the job running, or the cancelled result stored).
  FlushClaims();
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

bool JobLedger::TakeRescan(const std::string& stream) {
  bool wanted = false;
  for (auto it = unsure_claims_.begin(); it != unsure_claims_.end();) {
    if (it->first.first == stream && ++it->second <= kMaxRescans) wanted = true;
    // Not found by that many scans: not pending here any more (another daemon took it over).
    if (it->second > kMaxRescans) {
      claim_errors_.erase(it->first);
      it = unsure_claims_.erase(it);
    } else {
      ++it;
    }
  }
  return wanted;
}

void JobLedger::RefreshLeases(std::function<void(const std::string&, const std::string&)> lost) {
  if (held_.empty()) return;
  std::vector<std::string> keys, ids;
  for (const auto& [held, notify] : held_) {
    keys.push_back(held.first);
    ids.push_back(held.second);
  }
  std::vector<std::string> args = {std::to_string(keys.size())};
  args.insert(args.end(), keys.begin(), keys.end());
  args.push_back(config_.consumer);
  args.push_back(std::string(Keys::kGroup));
  args.insert(args.end(), ids.begin(), ids.end());
  cmd_->Eval(kRefreshScript, std::move(args),
             [this, keys = std::move(keys), ids = std::move(ids), lost = std::move(lost)](redisReply* r) {
               if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return;
               for (size_t i = 0; i < r->elements; ++i) {
                 long long k = r->element[i]->integer;  // 1-based, into the entries sent
                 if (k < 1 || static_cast<size_t>(k) > ids.size()) continue;
                 const std::string &stream = keys[static_cast<size_t>(k - 1)], &entry = ids[static_cast<size_t>(k - 1)];
                 // Finished meanwhile (our own FINISH acked it): not a loss.
                 if (!Holds(stream, entry)) continue;
                 lost(stream, entry);
               }
             });
}

}  // namespace sandpool
