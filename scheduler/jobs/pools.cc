#include "scheduler/jobs/pools.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "common/clock.h"
#include "common/log.h"
#include "worker/ipc/messages.h"

namespace sandpool {

Pools::Pools(struct event_base* base, const DaemonConfig& config, Metrics* metrics)
    : base_(base), config_(config), metrics_(metrics), demand_(config.templates.size()) {
  memory_budget_ = config_.memory_budget_bytes;
  if (memory_budget_ == 0) {
    memory_budget_ = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) / 4 * 3;
  }
  for (const TemplateConfig& t : config_.templates) {
    pool_metrics_.push_back(metrics_->AddTemplate(t.name, static_cast<double>(t.max_workers)));
  }
}

Status Pools::Start(UniqueFd spawner, SlotHooks hooks, std::function<void(const Status&)> on_spawner_lost) {
  hooks_ = std::move(hooks);
  hooks_.on_keeper_lost = [this](Slot& s) { OnKeeperLost(s); };
  hooks_.on_prepared = [this, prepared = std::move(hooks_.on_prepared)](Slot& s, double seconds) {
    metrics_->ObserveSandboxPrepare(pool_metrics_[s.template_index()], seconds);
    if (prepared) prepared(s, seconds);
  };
  hooks_.on_prepare_failed = [this](Slot& s) {
    metrics_->PoolRefillFailed(pool_metrics_[s.template_index()], "prepare_failed");
  };
  spawner_.Open(base_, std::move(spawner), [this](Frame& f) { OnSpawnerFrame(f); },
                [this, lost = std::move(on_spawner_lost)](const Status& why) {
                  // Whoever waits for a keeper or a disk hears now that none is coming.
                  auto keepers = std::move(keeper_waits_);
                  auto disks = std::move(disk_waits_);
                  for (auto& [slot, done] : keepers) done(KeeperHandle{});
                  for (auto& [req, done] : disks) done("the spawner is gone", 0);
                  if (lost) lost(why);
                });
  for (uint32_t t = 0; t < config_.templates.size(); ++t) {
    for (uint32_t k = 0; k < config_.templates[t].min_workers; ++k) {
      if (!Grow(t, "minimum")) {
        return Status::Error("the host budget (--max-sandboxes, --memory-budget) does not fit the templates' workers");
      }
    }
  }
  return Status::Ok();
}

void Pools::SpawnKeeper(uint32_t slot) {
  uint32_t tmpl = slots_[slot]->template_index();
  Status s = spawner_.Send(static_cast<uint16_t>(MsgType::kSpawnKeeper), Encode(SpawnKeeperMsg{slot, tmpl}));
  if (!s.ok()) LogError("cannot reach the spawner", {{"error", s.message()}});
}

void Pools::OnSpawnerFrame(Frame& f) {
  if (f.type == static_cast<uint16_t>(MsgType::kDiskMade)) {
    DiskMadeMsg made;
    if (!Decode(f.payload, &made).ok()) return;
    auto it = disk_waits_.find(made.request);
    if (it == disk_waits_.end()) return;
    auto done = std::move(it->second);
    disk_waits_.erase(it);
    done(made.error, made.data_bytes);
    return;
  }
  KeeperMsg m;
  if (f.type == static_cast<uint16_t>(MsgType::kKeeper) && Decode(f.payload, &m).ok() && m.slot >= SessionSlotBase()) {
    auto it = keeper_waits_.find(m.slot);
    if (it == keeper_waits_.end() || f.fds.size() != 2) return;
    auto done = std::move(it->second);
    keeper_waits_.erase(it);
    done(KeeperHandle{m.slot, m.pid, std::move(f.fds[0]), std::move(f.fds[1])});
    return;
  }
  if (f.type != static_cast<uint16_t>(MsgType::kKeeper) || !Decode(f.payload, &m).ok() || f.fds.size() != 2 ||
      m.slot >= slots_.size() || !slots_[m.slot]->active) {
    return;  // a keeper for a slot retired meanwhile: dropping the fd makes it exit
  }
  slots_[m.slot]->AttachKeeper(std::move(f.fds[0]), m.pid, std::move(f.fds[1]));
  UpdateGauges();
}

void Pools::OnKeeperLost(Slot& s) {
  int& backoff = respawn_backoff_ms_[s.index()];
  backoff = backoff == 0 ? 100 : std::min(backoff * 2, 5000);
  UpdateGauges();
  if (draining_ || !s.active) return;
  metrics_->PoolRefillFailed(pool_metrics_[s.template_index()], "keeper_lost");
  // Started again after a pause, so a keeper that dies at once does not spin.
  struct Again {
    Pools* pools;
    uint32_t slot;
  };
  struct timeval tv = {backoff / 1000, (backoff % 1000) * 1000};
  event_base_once(base_, -1, EV_TIMEOUT, [](evutil_socket_t, short, void* arg) {
    std::unique_ptr<Again> a(static_cast<Again*>(arg));
    Slot* slot = a->pools->slots_[a->slot].get();
    if (!a->pools->draining_ && slot->active && !slot->has_keeper()) a->pools->SpawnKeeper(a->slot);
  }, new Again{this, s.index()}, &tv);
}

Slot* Pools::ReadySlot(uint32_t t) {
  for (auto& s : slots_) {
    if (s->active && s->template_index() == t && s->ready()) return s.get();
  }
  return nullptr;
}

size_t Pools::ReadyCount(uint32_t t) const {
  return CountSlots([t](const Slot& s) { return s.active && s.template_index() == t && s.ready(); });
}

size_t Pools::ReadyCount() const {
  return CountSlots([](const Slot& s) { return s.active && s.ready(); });
}

size_t Pools::BusyCount() const {
  return CountSlots([](const Slot& s) { return s.busy(); });
}

size_t Pools::BusyCount(uint32_t t) const {
  return CountSlots([t](const Slot& s) { return s.template_index() == t && s.busy(); });
}

size_t Pools::RefillingCount(uint32_t t) const {
  return CountSlots([t](const Slot& s) { return s.active && s.template_index() == t && s.refilling(); });
}

size_t Pools::RefillingCount() const {
  return CountSlots([](const Slot& s) { return s.active && s.refilling(); });
}

size_t Pools::SlotCount() const {
  return CountSlots([](const Slot& s) { return s.active; });
}

bool Pools::AnyBusy() const { return BusyCount() > 0; }

uint32_t Pools::PoolSize(uint32_t t) const {
  return static_cast<uint32_t>(CountSlots([t](const Slot& s) { return s.active && s.template_index() == t; }));
}

void Pools::Held(uint32_t* sandboxes, uint64_t* memory) const {
  *sandboxes = static_cast<uint32_t>(session_count_);
  *memory = session_memory_;
  for (const auto& s : slots_) {
    if (!s->active) continue;
    ++*sandboxes;
    *memory += config_.templates[s->template_index()].sandbox.cgroup.memory_bytes;
  }
}

bool Pools::SessionFits(uint64_t memory_bytes) const {
  uint32_t held = 0;
  uint64_t memory = 0;
  Held(&held, &memory);
  return !draining_ && held < config_.max_sandboxes && memory + memory_bytes <= memory_budget_;
}

bool Pools::TakeSessionBudget(uint64_t memory_bytes) {
  if (!SessionFits(memory_bytes)) return false;
  ++session_count_;
  session_memory_ += memory_bytes;
  return true;
}

void Pools::ReturnSessionBudget(uint64_t memory_bytes) {
  if (session_count_ > 0) --session_count_;
  session_memory_ -= std::min(session_memory_, memory_bytes);
}

uint32_t Pools::SessionSlotBase() const {
  return config_.max_sandboxes + static_cast<uint32_t>(config_.templates.size());
}

uint64_t Pools::UidSpan(const DaemonConfig& config) {
  return 2ull * (2ull * config.max_sandboxes + 2ull * config.templates.size());
}

size_t Pools::SessionSlots() const { return config_.max_sandboxes + config_.templates.size(); }

size_t Pools::FreeSessionSlots() const { return SessionSlots() - std::min(SessionSlots(), session_slots_.size()); }

void Pools::SpawnSessionKeeper(uint32_t t, std::function<void(KeeperHandle)> done) {
  uint32_t slot = SessionSlotBase();
  while (session_slots_.count(slot)) ++slot;
  if (slot >= SessionSlotBase() + SessionSlots()) {
    done(KeeperHandle{});  // more keepers than sandboxes could ever run: refused
    return;
  }
  SpawnKeeperMsg m{slot, t, true};
  Status s = spawner_.Send(static_cast<uint16_t>(MsgType::kSpawnKeeper), Encode(m));
  if (!s.ok()) {
    done(KeeperHandle{});
    return;
  }
  session_slots_.insert(slot);
  keeper_waits_[slot] = std::move(done);
}

void Pools::ReleaseSessionSlot(uint32_t slot) {
  keeper_waits_.erase(slot);
  session_slots_.erase(slot);
}

void Pools::MakeDisk(const std::string& path, uint64_t bytes, const std::string& from, DiskDone done) {
  uint64_t req = next_disk_request_++;
  Status s = spawner_.Send(static_cast<uint16_t>(MsgType::kMakeDisk), Encode(MakeDiskMsg{req, path, bytes, from}));
  if (!s.ok()) {
    done("the spawner is gone", 0);
    return;
  }
  disk_waits_[req] = std::move(done);
}

bool Pools::Grow(uint32_t tmpl, const char* why) {
  if (draining_) return false;
  const TemplateConfig& t = config_.templates[tmpl];
  uint32_t active = 0;
  uint64_t memory = 0;
  Held(&active, &memory);
  int free_index = -1;
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i]->active && free_index < 0 && !slots_[i]->has_keeper() && !slots_[i]->busy()) {
      free_index = static_cast<int>(i);
    }
  }
  if (PoolSize(tmpl) >= t.max_workers || active >= config_.max_sandboxes ||
      memory + t.sandbox.cgroup.memory_bytes > memory_budget_) {
    return false;
  }
  uint32_t index;
  if (free_index >= 0) {
    index = static_cast<uint32_t>(free_index);
  } else {
    index = static_cast<uint32_t>(slots_.size());
    if (index >= config_.max_sandboxes) return false;  // past the pools' uid range (SessionSlotBase)
    slots_.push_back(nullptr);
  }
  slots_[index] = std::make_unique<Slot>(base_, index, tmpl, t.sandbox.runtime, t.env, hooks_);
  demand_[tmpl].last_change_us = MonotonicUs();
  LogDebug("pool grows", {{"template", t.name}, {"slot", index}, {"why", why}});
  SpawnKeeper(index);
  return true;
}

void Pools::NoteHit(uint32_t t) {
  ++demand_[t].arrivals_since_tick;
  metrics_->PoolHit(pool_metrics_[t]);
  metrics_->ObservePoolWait(pool_metrics_[t], 0);
}

void Pools::NoteAhead(uint32_t t) {
  ++demand_[t].arrivals_since_tick;
  metrics_->PoolHit(pool_metrics_[t]);
}

void Pools::NoteMiss(uint32_t t) {
  ++demand_[t].arrivals_since_tick;
  metrics_->PoolMiss(pool_metrics_[t]);
  Grow(t, "miss");
}

void Pools::NoteWaited(uint32_t t, double seconds) { metrics_->ObservePoolWait(pool_metrics_[t], seconds); }

void Pools::NoteRun(uint32_t t, double seconds) {
  Demand& d = demand_[t];
  d.run_s = 0.9 * d.run_s + 0.1 * seconds;
  metrics_->ObserveRunDuration(pool_metrics_[t], seconds);
}

// Shrinking waits 10 s after the last change and retires only idle (ready) slots.
void Pools::Resize(const std::vector<size_t>& waiting) {
  int64_t now = MonotonicUs();
  double tick_s = static_cast<double>(config_.heartbeat_ms) / 1000.0;
  for (uint32_t t = 0; t < config_.templates.size(); ++t) {
    const TemplateConfig& tc = config_.templates[t];
    Demand& d = demand_[t];
    double rate = static_cast<double>(d.arrivals_since_tick) / tick_s;
    d.arrivals_since_tick = 0;
    double alpha = std::min(1.0, tick_s / 10.0);
    d.arrivals_per_s = (1 - alpha) * d.arrivals_per_s + alpha * rate;
    uint32_t want = static_cast<uint32_t>(std::ceil(d.arrivals_per_s * d.run_s)) + 1 +
                    static_cast<uint32_t>(t < waiting.size() ? waiting[t] : 0);
    want = std::clamp(want, tc.min_workers, tc.max_workers);
    uint32_t have = PoolSize(t);
    if (have < want && !draining_) {
      Grow(t, "demand");
    } else if (have > want && now - d.last_change_us > 10 * 1000000) {
      for (auto& s : slots_) {
        if (s->active && s->template_index() == t && s->ready()) {
          LogDebug("pool shrinks", {{"template", tc.name}, {"slot", s->index()}});
          s->active = false;
          s->Shutdown();
          d.last_change_us = now;
          break;
        }
      }
    }
    metrics_->SetPool(pool_metrics_[t], static_cast<double>(ReadyCount(t)), static_cast<double>(BusyCount(t)),
                      PoolSize(t), static_cast<double>(t < waiting.size() ? waiting[t] : 0));
  }
}

void Pools::UpdateGauges() {
  double starting = 0, ready = 0, busy = 0, failed = 0;
  for (auto& s : slots_) {
    if (!s->active) continue;
    if (s->busy()) busy += 1;
    else if (s->ready()) ready += 1;
    else (s->failing() ? failed : starting) += 1;
  }
  metrics_->SetWorkers("starting", starting);
  metrics_->SetWorkers("ready", ready);
  metrics_->SetWorkers("busy", busy);
  metrics_->SetWorkers("failed", failed);
}

void Pools::ShutdownAll() {
  for (auto& s : slots_) s->Shutdown();
  spawner_.Close();
}

}  // namespace sandpool
