// sandpoold's scheduler: the wiring of one daemon. Everything runs on one libevent loop; the
// only other processes are the spawner and keepers (worker/), reached through channels.
//
//   StreamReader  which entries to take from Redis, and when (stream_reader.h)
//   Admit         entry -> valid job and its template, or why not (intake.h)
//   Pools         the slots and their keepers, sized to demand (pools.h)
//   JobLedger     claims, results, rejections, cancels and leases in Redis (job_ledger.h)
//   Sessions      the sessions this daemon holds, and their operations (sessions.h)
//   Daemon        glues them: a job read is admitted, claimed and started in a slot of its
//                 template (or waits for one, or is forwarded to a daemon that has one), its
//                 events are published, its result stored; plus signals, heartbeats, drain.
//
// Guarantees (docs/ARCHITECTURE.md, "Failure handling"): a busy host leaves jobs to others; an
// entry is acknowledged only in the same script that stores its result; while Redis is away,
// running jobs go on and their results wait in memory; a job whose entry another daemon took
// over is killed at once and its result dropped.
#pragma once

#include <event2/event.h>

#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "metrics/loop_lag.h"
#include "metrics/metrics.h"
#include "metrics/metrics_server.h"
#include "queue/keys.h"
#include "queue/protocol.h"
#include "scheduler/config/config.h"
#include "scheduler/jobs/intake.h"
#include "scheduler/jobs/job_ledger.h"
#include "scheduler/jobs/pools.h"
#include "scheduler/jobs/queue_figures.h"
#include "scheduler/jobs/stream_reader.h"
#include "scheduler/redis/redis_async.h"
#include "scheduler/sessions/sessions.h"
#include "worker/keeper/spawner.h"
#include "worker/sandbox/cgroup.h"

namespace sandpool {

struct Network;  // net_setup.h
class SdNotify;  // sd_notify.h

class Daemon {
 public:
  Daemon(const DaemonConfig& config, struct event_base* base, SpawnerHandle spawner, CgroupLayout layout);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Starts the endpoints, Redis connections and keepers. Returns once everything is under way;
  // the caller then runs the loop until it exits.
  Status Start();
  // Stops taking jobs; lets running jobs end within the grace period; then leaves the loop.
  void Drain(const char* why);
  // Kills keepers and the spawner and removes the cgroups. Call after the loop returned.
  void Stop();
  int exit_code() const { return exit_code_; }
  // The network table of this daemon's templates, their resolver, the preview proxy and the
  // sessions' exposed ports (main.cc owns them; they outlive the Daemon): Start starts the
  // resolver on the loop, the heartbeat exports the table's counters, Stop ends the proxy.
  // nullptr: none (no network templates; no template exposes ports or no preview listener).
  void SetNetwork(Network* network) { network_ = network; }
  // systemd's notify socket (main.cc owns it): READY=1 once Redis answers and every template has
  // a sandbox, STATUS= lines, STOPPING=1 and EXTEND_TIMEOUT_USEC= while draining, and the
  // watchdog's pings from this loop. nullptr or disabled: not run by systemd.
  void SetNotifier(SdNotify* notify) { notify_ = notify; }

 private:
  // A job is read: admit it, then start, park or forward it.
  void OnEntries(std::vector<StreamEntry> entries);
  void Dispatch(StreamEntry e);
  void Claim(Slot* slot, Admitted job, StreamEntry e);
  void Reject(const StreamEntry& e, const Rejection& why);
  void OnCancel(const std::string& job_id);
  void OnLeaseLost(const std::string& stream, const std::string& entry);
  void OnSlotReady(Slot& s);
  // Hands template `t`'s ready sandboxes to the entries waiting for one, oldest first, up to the
  // first that waits behind its forward queue (forwarded_).
  void ServeWaiting(uint32_t t);
  // The template whose forward queue `stream` is, or -1.
  int ForwardTemplate(const std::string& stream) const;
  // The entries this daemon forwarded are out of template `t`'s forward queue: the ones waiting
  // behind them are not behind anything any more.
  void ClearForwardMark(uint32_t t);
  void OnJobFinished(Slot& s, const SlotJob& job, JobResult&& r);

  size_t Waiting() const;
  size_t Room(size_t slots, size_t waiting) const;
  size_t IntakeCapacity() const;
  // The same, counting the slots whose next sandbox is being prepared (StreamReader::CarryRead).
  size_t IntakeCapacityAhead() const;
  // Entries the template's forward queue may give now: its ready sandboxes, less those owed to
  // the entries waiting here that are not behind it (forwarded_).
  size_t TemplateCapacity(uint32_t t) const;
  bool RedisResponsive(std::string* why) const;
  void Heartbeat();
  void NotifySystemd();
  void WriteHeartbeatRecord();
  void MaybeExit();
  void ReapChildren();
  static void OnHeartbeatTimer(evutil_socket_t, short, void* arg);
  static void OnSignal(evutil_socket_t sig, short, void* arg);
  static void OnGraceTimer(evutil_socket_t, short, void* arg);
  static void OnChildSignal(evutil_socket_t, short, void* arg);

  DaemonConfig config_;
  struct event_base* base_;
  SpawnerHandle spawner_;
  CgroupLayout layout_;
  Keys keys_;

  Metrics metrics_;
  Network* network_ = nullptr;
  SdNotify* notify_ = nullptr;
  bool notified_ready_ = false;
  bool record_stored_ = false;  // Redis has stored this daemon's record at least once
  std::string notified_status_;
  int64_t drain_deadline_us_ = 0;                // when the grace period ends (monotonic)
  std::unique_ptr<MetricsServer> http_;
  std::unique_ptr<LoopLagProbe> loop_lag_;
  std::unique_ptr<RedisAsync> cmd_, reader_, sub_;
  std::unique_ptr<Pools> pools_;
  std::unique_ptr<JobLedger> ledger_;
  std::unique_ptr<StreamReader> stream_reader_;
  std::unique_ptr<Sessions> sessions_;

  bool draining_ = false;
  int exit_code_ = 0;
  int64_t started_ms_ = 0;
  QueueFigures queue_figures_;  // the last ones read (heartbeat record)

  std::vector<std::deque<StreamEntry>> waiting_;  // per template: entries waiting for a slot here
  // Per template: this daemon moved entries to its forward queue, and they may still be there.
  // Until they are not, an intake entry of the template that cannot start at once waits here
  // behind them (StreamEntry::behind_forwarded), and a sandbox that the entries waiting from
  // before are not owed is read for from the forward queue (TemplateCapacity). Handed to the
  // later waiters, it would go ahead of them, and under a steady load they would wait until the
  // load stops. (Forwarding the waiters too, behind them, keeps the order but costs every job a
  // FORWARD call, its PUBLISH and a read of the forward queue: 5.8 round trips per python job at
  // 64 in flight instead of 2-3.)
  // They are known to be out when a read of the queue comes back empty, or when an entry read
  // from it (by this daemon) is not older than the newest one this daemon moved there (`last`,
  // FORWARD's reply): the group hands the queue's entries out in order, so every older one has
  // been read, by some daemon. The second matters when other daemons keep forwarding into the
  // queue: it may never be empty while the load lasts, and the waiters behind would wait as long.
  struct ForwardMark {
    bool set = false;
    int replies_owed = 0;  // FORWARD calls not answered yet: `last` may not be the newest
    std::string last;      // entry id, "" if none known
  };
  std::vector<ForwardMark> forwarded_;
  std::map<std::string, Slot*> running_;          // job id -> slot
  std::map<std::string, KillReason> takeovers_;   // job id -> taken over: its result is dropped
  std::set<std::string> claiming_;                // job ids whose claim is on its way
  std::set<std::string> cancels_heard_;           // of those, the ones a cancel came for

  struct event* heartbeat_ev_ = nullptr;
  struct event* grace_ev_ = nullptr;
  std::vector<struct event*> signal_evs_;
};

}  // namespace sandpool
