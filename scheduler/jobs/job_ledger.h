// The job ledger: every change of a job's state in Redis (PROTOCOL.md sections 4, 5 and 7),
// through the Lua scripts of scripts.h on the daemon's command connection: claims, results
// (stored, published, acked and deleted in one step), rejections and dead letters, cancels, and
// the leases on the stream entries this daemon holds.
//
// Guarantees:
//  - an entry is acknowledged only by the script that stores its result (or finds it has one);
//  - a result that cannot be stored now (Redis away or refusing) waits in memory and is sent
//    again on reconnect and every heartbeat, until Redis answers;
//  - the leases of held entries are renewed every heartbeat, and only while they are still this
//    daemon's: RefreshLeases names the ones another daemon took over.
//
// Round trips: claims and results are batched. The claims made in one turn of the event loop (an
// XREADGROUP reply's entries) go out at its end as one CLAIM script call, the results stored in
// one turn as one FINISH call (at most kMaxBatch entries or about kMaxBatchBytes each), and a
// job's live events ride with its FINISH when it ends within kEventHoldMs of them (Publish),
// which short jobs do: per call, not per byte, is what Redis spends its CPU on. Each entry of a
// batch keeps its own verdict and its own failure handling (a lost reply, an error). A FINISH call
// also carries the stream reader's read of the queue when it has one to make (SetReadAlong,
// StreamReader::CarryRead): on a busy queue, a job's result and the next entry for its slot go in
// one round trip.
//
// Ownership: the Daemon owns it; `base` and `cmd` outlive it. Loop thread only.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <event2/event.h>

#include "metrics/metrics.h"
#include "queue/keys.h"
#include "queue/protocol.h"
#include "scheduler/config/config.h"
#include "scheduler/jobs/stream_reader.h"
#include "scheduler/redis/redis_async.h"

namespace sandpool {

// What a completion record says of a result (PROTOCOL.md section 21): its outcome, exit code
// ("" for nil) and error code ("" for none). Empty: the script reads them from the result's bytes.
struct NotifySummary {
  std::string outcome, exit_code, error;
  static NotifySummary Of(const JobResult& r);
};

class JobLedger {
 public:
  // kFailed: Redis refused this entry's claim kMaxClaimErrors times in a row (claim_settle.h).
  enum class Verdict { kRun, kCancelled, kLost, kDrop, kUnknown, kFailed };

  JobLedger(struct event_base* base, RedisAsync* cmd, const Keys& keys, const DaemonConfig& config, Metrics* metrics);
  ~JobLedger();
  JobLedger(const JobLedger&) = delete;
  JobLedger& operator=(const JobLedger&) = delete;

  // How long a job's live events may wait for its FINISH to carry them (PROTOCOL.md section 6:
  // live output may lag this much; a job that runs longer gets them published on their own).
  static constexpr int kEventHoldMs = 2;
  // One script call carries at most this many entries (a script blocks Redis while it runs),
  // and stops taking results past about this many bytes of them.
  static constexpr size_t kMaxBatch = 128;
  static constexpr size_t kMaxBatchBytes = 1 << 20;
  // A result larger than this is staged: SET apart and moved into place by FINISH (scripts.h).
  // The bound of what a completion record carries, so a staged result is never carried by one.
  static constexpr size_t kStageBytes = kMaxCarriedResultBytes;
  // How long a staged result waits for its FINISH (which follows it at once on the connection).
  static constexpr int kStageTtlMs = 600000;

  // Entries this daemon holds (read and not yet finished): their leases are renewed. `notify`:
  // the entry's notify target (intake.h NotifyTargetOf), which its claim records. An entry is
  // named by its stream and id together: Redis numbers each stream apart, so the queue, a
  // forward queue and a session stream often have an entry of the same id.
  void Hold(const std::string& stream, const std::string& entry, std::string notify = "") {
    held_[{stream, entry}] = std::move(notify);
  }
  void Drop(const std::string& stream, const std::string& entry) { held_.erase({stream, entry}); }
  bool Holds(const std::string& stream, const std::string& entry) const { return held_.count({stream, entry}) > 0; }
  size_t held() const { return held_.size(); }

  // The CLAIM script, sent at the end of this loop turn with the other claims of the turn. `done`
  // runs once, with kUnknown when the reply was lost (whether the claim happened is unknown: the
  // entry is left pending for the own-pending scan, which claims it again as the same attempt)
  // or the batch could not be sent after all. Returns false (and `done` never runs) when Redis
  // is not connected.
  bool Claim(const std::string& job_id, const std::string& stream, const std::string& entry, uint32_t max_attempts,
             std::function<void(Verdict, uint32_t attempt)> done);
  // Stores `result` (FINISH, at the end of this loop turn with the turn's other results), or as
  // soon as Redis can take it. seq: the exited event's.
  // `template_name`: the job's template, for the outcome counter (Metrics folds names it does
  // not know, snapshots among them).
  void Finish(JobResult result, const std::string& stream, const std::string& entry, uint64_t seq,
              std::string_view template_name);
  // The same for a result already encoded (a session operation's, PROTOCOL.md section 13), with
  // its exited event; `attempt` is the claim's.
  void FinishEncoded(const std::string& id, uint32_t attempt, std::string result, std::string event,
                     const std::string& stream, const std::string& entry);
  // Answers an entry that was never claimed (REJECT: stored unless the id has a result, published,
  // recorded to `notify` (a notify target, "" for none), acked and deleted), with a result
  // already encoded.
  void Answer(const std::string& id, const std::string& stream, const std::string& entry, const std::string& result,
              const std::string& event, const std::string& notify = "", const NotifySummary& summary = {});
  // An entry that cannot run: its error result (REJECT), and the raw entry to the dead-letter
  // stream when `dead_letter`.
  void Reject(const std::string& job_id, const std::string& stream, const std::string& entry, ErrorCode code,
              std::string message, const std::map<std::string, std::string>& fields, bool dead_letter);
  // Acks and deletes an entry that needs no result (a duplicate, one that has a result).
  void Ack(const std::string& stream, const std::string& entry);
  // Moves an entry to its template's forward queue (FORWARD); the lease goes with it. `moved`
  // gets the entry's id there, or "" if Redis did not answer or the entry was gone.
  void Forward(const std::string& job_id, const std::string& stream, const std::string& entry, const std::string& to,
               std::function<void(const std::string& moved)> moved);
  // At-most-once live event of a job (PROTOCOL.md section 6): held back for at most
  // kEventHoldMs, then published, or sent with the job's FINISH if that comes first. Events of
  // one job keep their order.
  void Publish(const std::string& job_id, std::string event);
  // A cancel was heard for a job not running here: store its cancelled result if it is queued.
  void CancelQueued(const std::string& job_id);
  // Which of `job_ids` have their cancel flag set (so cancels never depend on pub/sub).
  void CheckCancels(const std::vector<std::string>& job_ids, std::function<void(const std::string&)> cancelled);
  // Whether `stream`'s own pending entries should be scanned again (StreamReader::RescanOwn):
  // a claim there ended with its outcome unknown (its reply lost, or an error from Redis: out of
  // memory, a busy script, a key of the wrong type), so its entry waits, pending here and held by
  // nobody, for a scan to claim it again as the same attempt. Each such claim asks for at most
  // kMaxRescans scans (one per heartbeat); after that only a reconnect scans again.
  static constexpr int kMaxRescans = 30;
  bool TakeRescan(const std::string& stream);
  // A claim that Redis refuses this many times in a row (an error of the script, not a lost
  // reply: the job's hash holds something else, say) is given up: its verdict is kFailed, and
  // the result its caller then stores goes by the REJECT script, which reads no job hash. So an
  // entry whose state in Redis cannot be read ends with an error result instead of staying
  // pending for ever; it never ran.
  static constexpr int kMaxClaimErrors = 5;
  // Renews the leases of every held entry; `lost` gets the entries another daemon took over.
  void RefreshLeases(std::function<void(const std::string& stream, const std::string& entry)> lost);
  // Results waiting for Redis go out (on reconnect and every heartbeat).
  void FlushPending();
  // Each FINISH call asks `take` for a read to carry (after its results, scripts.h) and hands
  // the read's reply to `done` (nullptr when the call's reply was lost or malformed, or the call
  // was never sent), after the results' verdicts.
  using ReadAlong = StreamReader::CarriedRead;
  void SetReadAlong(std::function<std::optional<ReadAlong>()> take,
                    std::function<void(const ReadAlong&, redisReply*)> done) {
    take_read_ = std::move(take);
    read_done_ = std::move(done);
  }
  // Sends the claims and results gathered this turn now instead of at its end (before the
  // daemon decides whether it may leave).
  void Flush() {
    FlushClaims();
    FlushFinishes();
  }
  // Results not handed to Redis yet: waiting for it, or gathered this turn.
  size_t pending_results() const { return pending_.size() + finishes_.size(); }

 private:
  struct PendingFinish {
    std::string job_id, stream, entry, attempt, result, event;
    NotifySummary summary;
    std::vector<std::string> live;  // live events held back for this FINISH to publish first
    bool staged() const { return result.size() > kStageBytes; }  // its result goes by a stage key
  };
  struct PendingClaim {
    std::string job_id, stream, entry, notify;
    uint32_t max_attempts;
    bool retry_own;
    std::function<void(Verdict, uint32_t)> done;
  };
  void SendFinish(PendingFinish f);
  // The claims and results gathered this turn go out (OnFlush: end of the loop turn).
  static void OnFlush(evutil_socket_t, short, void* arg);
  void ScheduleFlush();
  void FlushClaims();
  void FlushFinishes();
  void SendClaims(std::vector<PendingClaim> batch);
  void SendFinishes(std::vector<PendingFinish> batch);
  void TakeFinishVerdict(PendingFinish& f, const redisReply* verdict);
  static void OnHoldTimer(evutil_socket_t, short, void* arg);
  void FlushHeld();
  void PublishNow(const std::string& job_id, std::string event);

  RedisAsync* cmd_;
  struct event* hold_timer_;
  struct event* flush_event_;  // activated when something is gathered: runs at the turn's end
  std::vector<PendingClaim> claims_;      // gathered this turn
  std::vector<PendingFinish> finishes_;  // gathered this turn
  std::map<std::string, std::vector<std::string>> held_events_;  // job id -> its events, in order
  const Keys& keys_;
  const DaemonConfig& config_;
  Metrics* metrics_;
  using Entry = std::pair<std::string, std::string>;  // stream, entry id
  std::map<Entry, std::string> held_;  // -> its notify target
  std::map<Entry, int> unsure_claims_;  // claims whose outcome is unknown -> rescans asked for
  std::map<Entry, int> claim_errors_;   // -> refusals in a row (kMaxClaimErrors)
  std::map<Entry, std::string> failed_claims_;  // given up (kFailed) -> notify target; answered by REJECT
  std::deque<PendingFinish> pending_;
  std::function<std::optional<ReadAlong>()> take_read_;
  std::function<void(const ReadAlong&, redisReply*)> read_done_;
};

}  // namespace sandpool
