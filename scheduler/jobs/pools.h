// The warm pools: every slot of every template, their keepers (started through the spawner and
// started again when they die), and how many slots each template has. Sizing follows demand
// (docs/ARCHITECTURE.md, "Templates and warm pools"): each heartbeat a pool is sized to its
// arrival rate times its run time (Little's law), plus what waits for it, plus one spare,
// within [workers, max-workers] and the host budget (--max-sandboxes, --memory-budget).
//
// Ownership: the Daemon owns Pools, Pools own the Slots; callbacks (SlotHooks) run on the loop.
#pragma once

#include <event2/event.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "metrics/metrics.h"
#include "scheduler/config/config.h"
#include "scheduler/jobs/loop_channel.h"
#include "scheduler/jobs/session_host.h"
#include "scheduler/jobs/slot.h"

namespace sandpool {

class Pools final : public SessionHost {
 public:
  Pools(struct event_base* base, const DaemonConfig& config, Metrics* metrics);
  Pools(const Pools&) = delete;
  Pools& operator=(const Pools&) = delete;

  // Talks to the spawner over `spawner` and starts each template's minimum of slots. `hooks` are
  // given to every slot; on_keeper_lost is Pools' own (a keeper is started again after a pause).
  // `on_spawner_lost` runs once if the spawner goes away (no sandbox can ever be made again).
  Status Start(UniqueFd spawner, SlotHooks hooks, std::function<void(const Status&)> on_spawner_lost);
  // No keeper is started again once draining.
  void SetDraining() { draining_ = true; }

  size_t templates() const { return config_.templates.size(); }
  // A slot of template `t` whose sandbox is ready for a job, or nullptr.
  Slot* ReadySlot(uint32_t t);
  size_t ReadyCount(uint32_t t) const;
  size_t ReadyCount() const;
  size_t BusyCount() const;
  size_t BusyCount(uint32_t t) const;
  // Active slots of `t` (of any template) whose next sandbox a keeper is preparing.
  size_t RefillingCount(uint32_t t) const;
  size_t RefillingCount() const;
  size_t SlotCount() const;  // active slots
  uint32_t PoolSize(uint32_t t) const;
  // Whether a job is held by any slot (running, or reserved while its claim is in flight).
  bool AnyBusy() const;
  // Adds a slot to template `t`'s pool if its maximum and the host budget allow.
  bool Grow(uint32_t t, const char* why);

  // Metrics: Pools observe their slots' sandbox preparations and refill failures themselves.
  // Demand, for sizing and the pool metrics: a job for `t` arrived and found a ready slot
  // (NoteHit) or none (NoteMiss, which also grows the pool if it may); a job that missed got a
  // slot after waiting `seconds` (NoteWaited); a job of `t` ran for `seconds` (NoteRun). A job
  // read ahead of its sandbox, which a keeper was preparing (NoteAhead), counts as a hit: it
  // waits for the sandbox it was read for, and NoteWaited observes how long.
  void NoteHit(uint32_t t);
  void NoteAhead(uint32_t t);
  void NoteMiss(uint32_t t);
  void NoteWaited(uint32_t t, double seconds);
  void NoteRun(uint32_t t, double seconds);
  // Template `t`'s index in the Metrics' per-template series.
  size_t MetricsIndex(uint32_t t) const { return pool_metrics_[t]; }
  // Once per heartbeat (also sets the per-template gauges). `waiting[t]`: jobs of `t` waiting
  // for a slot here.
  void Resize(const std::vector<size_t>& waiting);
  void UpdateGauges();

  std::vector<std::unique_ptr<Slot>>& slots() { return slots_; }

  // ---- Sessions (sessions.h): their keepers, disks and share of the host budget ----
  // A slot number picks the sandbox's host uids (--uid-base + 2n, + 2n + 1) and its cgroup, so
  // no two sandboxes of a daemon may share one. The daemon's range, in slot numbers:
  //   [0, max-sandboxes)                          pool slots
  //   [max-sandboxes, + templates)                template builds (main.cc)
  //   [SessionSlotBase(), + SessionSlots())       session keepers (running, spares, ahead)
  uint32_t SessionSlotBase() const;
  size_t SessionSlots() const;  // max-sandboxes + templates
  // How many host uids the daemon uses from --uid-base (docs/SECURITY.md).
  static uint64_t UidSpan(const DaemonConfig& config);
  // SessionHost: keepers are started by the spawner (it runs mke2fs for disks too).
  void SpawnSessionKeeper(uint32_t t, std::function<void(KeeperHandle)> done) override;
  void ReleaseSessionSlot(uint32_t slot) override;
  size_t FreeSessionSlots() const override;
  void MakeDisk(const std::string& path, uint64_t bytes, const std::string& from, DiskDone done) override;
  bool SessionFits(uint64_t memory_bytes) const override;
  bool TakeSessionBudget(uint64_t memory_bytes) override;
  void ReturnSessionBudget(uint64_t memory_bytes) override;
  size_t running_sessions() const { return session_count_; }
  // Closes every keeper's channel (they exit, and their sandboxes with them).
  void ShutdownAll();

 private:
  template <typename Pred>
  size_t CountSlots(Pred pred) const {
    size_t n = 0;
    for (const auto& s : slots_) n += pred(*s);
    return n;
  }
  struct Demand {  // EWMA over roughly the last 10 s
    double arrivals_per_s = 0;
    double run_s = 0.05;
    uint64_t arrivals_since_tick = 0;
    int64_t last_change_us = 0;
  };

  void SpawnKeeper(uint32_t slot);
  // Sandboxes and memory held now by active slots and running sessions.
  void Held(uint32_t* sandboxes, uint64_t* memory) const;
  void OnSpawnerFrame(Frame& f);
  void OnKeeperLost(Slot& s);

  struct event_base* base_;
  const DaemonConfig& config_;
  Metrics* metrics_;
  SlotHooks hooks_;
  LoopChannel spawner_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<Demand> demand_;
  std::vector<size_t> pool_metrics_;  // per template: its index in metrics_
  std::map<uint32_t, int> respawn_backoff_ms_;
  uint64_t memory_budget_ = 0;
  size_t session_count_ = 0;
  uint64_t session_memory_ = 0;
  std::set<uint32_t> session_slots_;  // in use
  std::map<uint32_t, std::function<void(KeeperHandle)>> keeper_waits_;  // slot -> who waits
  std::map<uint64_t, DiskDone> disk_waits_;                              // request -> who waits
  uint64_t next_disk_request_ = 1;
  bool draining_ = false;
};

}  // namespace sandpool
