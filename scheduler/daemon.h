// sandpoold's scheduler: takes jobs from the Redis stream, runs them in the pool's slots, and
// stores their results. Everything runs on one libevent loop; the only other processes are the
// spawner and keepers (worker/), reached through channels.
//
// Guarantees (docs/ARCHITECTURE.md, "Failure handling"):
//  - it reads only as many entries as it has ready slots (a busy host leaves jobs to others);
//  - an entry is acknowledged only in the same Lua script that stores its result;
//  - its own pending entries are refreshed every heartbeat, so only a dead daemon's go idle,
//    and it reclaims entries idle past the lease (XAUTOCLAIM), and its own on every connect;
//  - while Redis is away, running jobs go on and their results wait in memory.
#pragma once

#include <event2/event.h>

#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "metrics/metrics.h"
#include "metrics/metrics_server.h"
#include "queue/keys.h"
#include "queue/protocol.h"
#include "scheduler/config.h"
#include "scheduler/loop_channel.h"
#include "scheduler/redis_async.h"
#include "scheduler/slot.h"
#include "worker/cgroup.h"
#include "worker/channel.h"
#include "worker/spawner.h"

namespace sandpool {

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

 private:
  struct Entry {
    std::string id;  // stream entry id
    bool deleted = false;  // XDEL'd while pending: nothing to run
    std::map<std::string, std::string> fields;
    int64_t waiting_since_us = 0;  // set when it first found its template's pool empty
  };
  // Demand seen by a template's pool, for sizing it (EWMA over roughly the last 10 s).
  struct PoolDemand {
    double arrivals_per_s = 0;
    double run_s = 0.05;
    uint64_t arrivals_since_tick = 0;
    int64_t last_change_us = 0;
  };
  struct PendingFinish {
    std::string job_id, entry, attempt, result, event;
  };

  // Redis side.
  void OnCommandConnected();
  void CreateGroup();
  void FlushPendingFinishes();
  void MaybeRead();
  void ReadOwnPending();
  void HandleEntries(redisReply* entries);
  void Dispatch(Entry e);
  void Claim(Slot* slot, JobSpec spec, Entry e);
  // Ends an entry that cannot run with an error result. Entries that cannot be decoded, or whose
  // id is unusable, also go to the dead-letter stream with (the start of) their raw payload.
  void Reject(const std::string& job_id, const Entry& e, ErrorCode code, std::string message, bool dead_letter);
  void Finish(JobResult result, const std::string& entry, uint64_t seq);
  void SendFinish(PendingFinish f);
  void Ack(const std::string& entry);
  void Publish(const std::string& job_id, std::string event);
  void OnCancel(const std::string& job_id);
  void Heartbeat();
  void Reclaim();

  // Slots, keepers and pools.
  void SpawnKeeper(uint32_t slot);
  void OnSpawnerFrame(Frame& f);
  Slot* ReadySlot();                  // of any template
  Slot* ReadySlot(uint32_t tmpl);
  int TemplateFor(const JobSpec& spec) const;  // -1: unknown template
  // Adds a slot to a template's pool if the host budget allows; false otherwise.
  bool GrowPool(uint32_t tmpl, const char* why);
  void ResizePools();
  uint32_t PoolSize(uint32_t tmpl) const;
  void UpdateWorkerGauges();
  void MaybeExit();

  static void OnHeartbeatTimer(evutil_socket_t, short, void* arg);
  static void OnSignal(evutil_socket_t sig, short, void* arg);
  static void OnGraceTimer(evutil_socket_t, short, void* arg);
  static void OnChildSignal(evutil_socket_t, short, void* arg);
  void ReapChildren();

  DaemonConfig config_;
  struct event_base* base_;
  SpawnerHandle spawner_;
  LoopChannel spawner_channel_;
  CgroupLayout layout_;
  Keys keys_;
  std::string stream_;

  Metrics metrics_;
  std::unique_ptr<MetricsServer> http_;
  std::unique_ptr<RedisAsync> cmd_, reader_, sub_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::map<uint32_t, int> respawn_backoff_ms_;
  size_t BacklogSize() const;
  // Entries this daemon can take now: ready slots minus entries already waiting for a pool.
  size_t ReadCapacity() const;

  bool group_ready_ = false;
  bool read_in_flight_ = false;
  bool own_pending_scan_ = true;  // read our own pending entries before new ones
  bool draining_ = false;
  int exit_code_ = 0;
  uint64_t ticks_ = 0;
  int64_t started_ms_ = 0;

  std::vector<std::deque<Entry>> backlog_;       // per template: entries waiting for a slot
  std::vector<size_t> pool_metrics_;             // per template: index in metrics_
  std::vector<PoolDemand> demand_;               // per template
  SlotHooks hooks_;
  uint64_t memory_budget_ = 0;
  std::set<std::string> inflight_entries_;       // entries this daemon holds (PEL refresh)
  std::map<std::string, Slot*> running_;         // job id -> slot
  std::set<std::string> cancelled_unstarted_;    // cancels seen for jobs not (yet) running here
  std::set<std::string> unsure_claims_;          // claims sent whose reply was lost
  std::deque<PendingFinish> pending_finishes_;   // results waiting for Redis

  struct event* heartbeat_ev_ = nullptr;
  struct event* grace_ev_ = nullptr;
  std::vector<struct event*> signal_evs_;
};

}  // namespace sandpool
