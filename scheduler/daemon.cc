#include "scheduler/daemon.h"

#include <signal.h>
#include <cerrno>
#include <sys/wait.h>
#include <unistd.h>

#include <msgpack.hpp>

#include <algorithm>
#include <cmath>

#include "common/clock.h"
#include "common/log.h"
#include "common/runtimes.h"
#include "scheduler/scripts.h"

namespace sandpool {
namespace {

constexpr int kBlockMs = 2000;
constexpr size_t kOwnPendingBatch = 100;

std::string ReplyString(const redisReply* r) {
  if (r == nullptr) return {};
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR) {
    return std::string(r->str, r->len);
  }
  if (r->type == REDIS_REPLY_INTEGER) return std::to_string(r->integer);
  return {};
}

int64_t EntryMs(const std::string& id) { return std::strtoll(id.c_str(), nullptr, 10); }

}  // namespace

Daemon::Daemon(const DaemonConfig& config, struct event_base* base, SpawnerHandle spawner, CgroupLayout layout)
    : config_(config), base_(base), spawner_(std::move(spawner)), layout_(std::move(layout)),
      keys_(config.prefix), stream_(keys_.Queue(config.queue)) {}

Daemon::~Daemon() {
  for (struct event* e : signal_evs_) event_free(e);
  if (heartbeat_ev_) event_free(heartbeat_ev_);
  if (grace_ev_) event_free(grace_ev_);
}

Status Daemon::Start() {
  started_ms_ = WallMs();
  if (config_.metrics_addr != "off" && !config_.metrics_addr.empty()) {
    auto server = MetricsServer::Start(base_, config_.metrics_addr, &metrics_, [this](std::string* why) {
      if (draining_) { *why = "draining"; return false; }
      if (!cmd_->connected() || !reader_->connected()) { *why = "redis not connected"; return false; }
      if (ReadySlot() == nullptr && running_.empty()) { *why = "no sandbox ready"; return false; }
      return true;
    });
    if (!server.ok()) return server.status().Prefixed("metrics endpoint " + config_.metrics_addr);
    http_ = std::move(server.value());
    LogInfo("metrics endpoint listening", {{"addr", config_.metrics_addr}, {"port", http_->BoundPort()}});
  }

  for (int sig : {SIGTERM, SIGINT}) {
    struct event* e = evsignal_new(base_, sig, &Daemon::OnSignal, this);
    evsignal_add(e, nullptr);
    signal_evs_.push_back(e);
  }
  struct event* chld = evsignal_new(base_, SIGCHLD, &Daemon::OnChildSignal, this);
  evsignal_add(chld, nullptr);
  signal_evs_.push_back(chld);
  spawner_channel_.Open(
      base_, std::move(spawner_.channel), [this](Frame& f) { OnSpawnerFrame(f); },
      [this](const Status& why) {
        // Without the spawner no sandbox can ever be made again: stop, so a supervisor restarts us.
        LogError("spawner lost; shutting down", {{"error", why.message()}});
        exit_code_ = 1;
        Drain("spawner lost");
      });

  SlotHooks hooks;
  hooks.on_ready = [this](Slot& s) {
    UpdateWorkerGauges();
    // Jobs that were waiting for this template's pool come first.
    auto& waiting = backlog_[s.template_index()];
    if (!waiting.empty() && !draining_) {
      Entry e = std::move(waiting.front());
      waiting.pop_front();
      Dispatch(std::move(e));
    }
    MaybeRead();
  };
  hooks.on_started = [this](Slot& s) {
    const SlotJob* job = s.job();
    uint64_t seq = s.NextSeq();
    Publish(job->spec.id, EncodeStartedEvent(seq, config_.consumer, job->attempt));
  };
  hooks.on_output = [this](Slot& s, std::string_view stream, std::string_view data) {
    Publish(s.job()->spec.id, EncodeOutputEvent(s.NextSeq(), stream, data));
  };
  hooks.on_finished = [this](Slot& s, JobResult&& r) {
    running_.erase(r.id);
    PoolDemand& d = demand_[s.template_index()];
    d.run_s = 0.9 * d.run_s + 0.1 * (static_cast<double>(r.exec_time_us) / 1e6);
    metrics_.ObserveRunDuration(static_cast<double>(r.exec_time_us) / 1e6);
    // The entry id of the job that just ended: Finish needs it, the slot no longer has it.
    Finish(std::move(r), s.last_entry(), s.NextSeq());
    UpdateWorkerGauges();
    MaybeExit();
  };
  hooks.on_keeper_lost = [this](Slot& s) {
    int& backoff = respawn_backoff_ms_[s.index()];
    backoff = backoff == 0 ? 100 : std::min(backoff * 2, 5000);
    UpdateWorkerGauges();
    if (draining_ || !s.active) {
      MaybeExit();
      return;
    }
    // Respawn after a pause, so a keeper that dies at once does not spin.
    uint32_t index = s.index();
    struct timeval tv = {backoff / 1000, (backoff % 1000) * 1000};
    event_base_once(base_, -1, EV_TIMEOUT, [](evutil_socket_t, short, void* arg) {
      auto* p = static_cast<std::pair<Daemon*, uint32_t>*>(arg);
      Daemon* d = p->first;
      Slot* slot = d->slots_[p->second].get();
      if (!d->draining_ && slot->active && slot->state() == Slot::State::kNoKeeper) d->SpawnKeeper(p->second);
      delete p;
    }, new std::pair<Daemon*, uint32_t>(this, index), &tv);
  };
  hooks.on_prepared = [this](Slot&, double seconds) { metrics_.ObserveSandboxPrepare(seconds); };
  hooks_ = hooks;
  memory_budget_ = config_.memory_budget_bytes;
  if (memory_budget_ == 0) {
    memory_budget_ = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) / 4 * 3;
  }
  backlog_.resize(config_.templates.size());
  demand_.resize(config_.templates.size());
  for (uint32_t t = 0; t < config_.templates.size(); ++t) {
    pool_metrics_.push_back(metrics_.AddTemplate(config_.templates[t].name));
    for (uint32_t k = 0; k < config_.templates[t].min_workers; ++k) {
      if (!GrowPool(t, "minimum")) {
        return Status::Error("the host budget (--max-sandboxes, --memory-budget) does not fit the templates' workers");
      }
    }
  }

  cmd_ = std::make_unique<RedisAsync>(base_, config_.redis, "commands", RedisAsync::Hooks{
      [this] {
        metrics_.SetRedisConnected(true);
        OnCommandConnected();
      },
      [this] {
        metrics_.SetRedisConnected(false);
        metrics_.RedisReconnect();
        group_ready_ = false;
        own_pending_scan_ = true;
      }});
  reader_ = std::make_unique<RedisAsync>(base_, config_.redis, "reader", RedisAsync::Hooks{
      [this] { MaybeRead(); },
      [this] {
        read_in_flight_ = false;
        own_pending_scan_ = true;
      }});
  sub_ = std::make_unique<RedisAsync>(base_, config_.redis, "subscriber", RedisAsync::Hooks{});
  sub_->Subscribe(keys_.Cancel(), [this](redisReply* r) { OnCancel(ReplyString(r->element[2])); });
  cmd_->Connect();
  reader_->Connect();
  sub_->Connect();

  heartbeat_ev_ = event_new(base_, -1, EV_PERSIST, &Daemon::OnHeartbeatTimer, this);
  struct timeval tv = {static_cast<time_t>(config_.heartbeat_ms / 1000),
                       static_cast<suseconds_t>((config_.heartbeat_ms % 1000) * 1000)};
  event_add(heartbeat_ev_, &tv);
  LogInfo("sandpoold started", {{"consumer", config_.consumer}, {"queue", stream_}, {"workers", config_.workers},
                                {"redis", config_.redis.Redacted()},
                                {"cgroup", layout_.mode == CgroupMode::kV1 ? "v1" : "v2"}});
  return Status::Ok();
}

void Daemon::SpawnKeeper(uint32_t slot) {
  uint32_t tmpl = slots_[slot]->template_index();
  Status s = spawner_channel_.Send(static_cast<uint16_t>(MsgType::kSpawnKeeper), Encode(SpawnKeeperMsg{slot, tmpl}));
  if (!s.ok()) LogError("cannot reach the spawner", {{"error", s.message()}});
}

void Daemon::OnSpawnerFrame(Frame& f) {
  KeeperMsg m;
  if (f.type != static_cast<uint16_t>(MsgType::kKeeper) || !Decode(f.payload, &m).ok() || f.fds.size() != 2 ||
      m.slot >= slots_.size() || !slots_[m.slot]->active) {
    return;  // a keeper for a slot retired meanwhile: dropping the fd makes it exit
  }
  slots_[m.slot]->AttachKeeper(std::move(f.fds[0]), m.pid, std::move(f.fds[1]));
  UpdateWorkerGauges();
}

Slot* Daemon::ReadySlot() {
  for (auto& s : slots_) {
    if (s->active && s->state() == Slot::State::kReady) return s.get();
  }
  return nullptr;
}

Slot* Daemon::ReadySlot(uint32_t tmpl) {
  for (auto& s : slots_) {
    if (s->active && s->template_index() == tmpl && s->state() == Slot::State::kReady) return s.get();
  }
  return nullptr;
}

size_t Daemon::BacklogSize() const {
  size_t n = 0;
  for (const auto& b : backlog_) n += b.size();
  return n;
}

size_t Daemon::ReadCapacity() const {
  size_t ready = 0;
  for (const auto& s : slots_) ready += s->active && s->state() == Slot::State::kReady;
  size_t waiting = BacklogSize();
  return ready > waiting ? ready - waiting : 0;
}

uint32_t Daemon::PoolSize(uint32_t tmpl) const {
  uint32_t n = 0;
  for (const auto& s : slots_) n += s->active && s->template_index() == tmpl;
  return n;
}

int Daemon::TemplateFor(const JobSpec& spec) const {
  if (!spec.template_name.empty()) return FindTemplate(config_, spec.template_name);
  if (spec.code) {
    // The template named after the runtime, else any template that keeps it warm.
    int named = FindTemplate(config_, spec.runtime);
    if (named >= 0 && config_.templates[static_cast<size_t>(named)].sandbox.runtime == spec.runtime) return named;
    for (size_t i = 0; i < config_.templates.size(); ++i) {
      if (config_.templates[i].sandbox.runtime == spec.runtime) return static_cast<int>(i);
    }
  }
  return 0;  // "default"
}

bool Daemon::GrowPool(uint32_t tmpl, const char* why) {
  const TemplateConfig& t = config_.templates[tmpl];
  uint32_t active = 0;
  uint64_t memory = 0;
  int free_index = -1;
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i]->active) {
      ++active;
      memory += config_.templates[slots_[i]->template_index()].sandbox.cgroup.memory_bytes;
    } else if (free_index < 0 && slots_[i]->state() == Slot::State::kNoKeeper) {
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
    slots_.push_back(nullptr);
  }
  slots_[index] = std::make_unique<Slot>(base_, index, tmpl, t.sandbox.runtime, t.env, hooks_);
  demand_[tmpl].last_change_us = MonotonicUs();
  LogDebug("pool grows", {{"template", t.name}, {"slot", index}, {"why", why}});
  SpawnKeeper(index);
  return true;
}

// Sizes each template's pool to its recent demand: enough slots for the arrival rate times the
// run time (Little's law) plus one spare, within [min, max] and the host budget. Shrinking waits
// 10 s after the last change and retires only idle (ready) slots.
void Daemon::ResizePools() {
  int64_t now = MonotonicUs();
  double tick_s = static_cast<double>(config_.heartbeat_ms) / 1000.0;
  for (uint32_t t = 0; t < config_.templates.size(); ++t) {
    const TemplateConfig& tc = config_.templates[t];
    PoolDemand& d = demand_[t];
    double rate = static_cast<double>(d.arrivals_since_tick) / tick_s;
    d.arrivals_since_tick = 0;
    double alpha = std::min(1.0, tick_s / 10.0);
    d.arrivals_per_s = (1 - alpha) * d.arrivals_per_s + alpha * rate;
    uint32_t want = static_cast<uint32_t>(std::ceil(d.arrivals_per_s * d.run_s)) + 1 +
                    static_cast<uint32_t>(backlog_[t].size());
    want = std::clamp(want, tc.min_workers, tc.max_workers);
    uint32_t have = PoolSize(t);
    if (have < want && !draining_) {
      GrowPool(t, "demand");
    } else if (have > want && now - d.last_change_us > 10 * 1000000) {
      for (auto& s : slots_) {
        if (s->active && s->template_index() == t && s->state() == Slot::State::kReady) {
          LogDebug("pool shrinks", {{"template", tc.name}, {"slot", s->index()}});
          s->active = false;
          s->Shutdown();
          d.last_change_us = now;
          break;
        }
      }
    }
    uint32_t ready = 0;
    for (auto& s : slots_) ready += s->active && s->template_index() == t && s->state() == Slot::State::kReady;
    metrics_.SetPool(pool_metrics_[t], ready, PoolSize(t));
  }
}

void Daemon::UpdateWorkerGauges() {
  double starting = 0, ready = 0, busy = 0, failed = 0;
  for (auto& s : slots_) {
    if (!s->active) continue;
    switch (s->state()) {
      case Slot::State::kReady: ready += 1; break;
      case Slot::State::kReserved:
      case Slot::State::kRunning: busy += 1; break;
      default: (s->failing() ? failed : starting) += 1; break;
    }
  }
  metrics_.SetWorkers("starting", starting);
  metrics_.SetWorkers("ready", ready);
  metrics_.SetWorkers("busy", busy);
  metrics_.SetWorkers("failed", failed);
}

// The group starts at 0 so jobs queued before any daemon ever ran are not skipped. A failure
// other than "exists" (e.g. -LOADING while Redis replays its AOF) is retried every heartbeat.
void Daemon::CreateGroup() {
  cmd_->Command({"XGROUP", "CREATE", stream_, std::string(Keys::kGroup), "0", "MKSTREAM"}, [this](redisReply* r) {
    if (r == nullptr) return;
    if (r->type == REDIS_REPLY_ERROR && ReplyString(r).rfind("BUSYGROUP", 0) != 0) {
      LogWarn("cannot create the consumer group yet", {{"error", ReplyString(r)}});
      return;
    }
    group_ready_ = true;
    MaybeRead();
  });
}

void Daemon::FlushPendingFinishes() {
  std::deque<PendingFinish> waiting;
  waiting.swap(pending_finishes_);
  for (PendingFinish& f : waiting) SendFinish(std::move(f));
}

void Daemon::OnCommandConnected() {
  CreateGroup();
  // Results that waited for Redis go out first.
  FlushPendingFinishes();
  // Cancels published while we were away were missed: look at the flags of what runs here.
  for (const auto& [job_id, slot] : running_) {
    std::string id = job_id;
    cmd_->Command({"HGET", keys_.Job(id), "cancel"}, [this, id](redisReply* r) {
      if (ReplyString(r) == "1") OnCancel(id);
    });
  }
  Heartbeat();
}

void Daemon::MaybeRead() {
  if (draining_ || !group_ready_ || read_in_flight_ || !reader_ || !reader_->connected()) return;
  for (uint32_t t = 0; t < backlog_.size(); ++t) {
    while (!backlog_[t].empty() && ReadySlot(t) != nullptr) {
      Entry e = std::move(backlog_[t].front());
      backlog_[t].pop_front();
      Dispatch(std::move(e));
    }
  }
  if (own_pending_scan_) {
    ReadOwnPending();
    return;
  }
  size_t ready = ReadCapacity();
  if (ready == 0) return;
  read_in_flight_ = true;
  reader_->Command({"XREADGROUP", "GROUP", std::string(Keys::kGroup), config_.consumer, "COUNT", std::to_string(ready),
                    "BLOCK", std::to_string(kBlockMs), "STREAMS", stream_, ">"},
                   [this](redisReply* r) {
                     read_in_flight_ = false;
                     // While draining, entries that still arrive stay pending and unclaimed:
                     // another daemon, or our own restart, runs them.
                     if (r == nullptr || draining_) return;
                     if (r->type == REDIS_REPLY_ERROR) {
                       LogWarn("XREADGROUP failed", {{"error", ReplyString(r)}});
                       if (ReplyString(r).rfind("NOGROUP", 0) == 0) group_ready_ = false;
                       return;
                     }
                     if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->elements == 2) {
                       HandleEntries(r->element[0]->element[1]);
                     }
                     MaybeRead();
                   });
}

// Entries delivered to this consumer name before and never acknowledged: a previous run of
// this daemon died with them, or Redis dropped a reply. The claim script tells which ran.
void Daemon::ReadOwnPending() {
  read_in_flight_ = true;
  reader_->Command({"XREADGROUP", "GROUP", std::string(Keys::kGroup), config_.consumer, "COUNT",
                    std::to_string(kOwnPendingBatch), "STREAMS", stream_, "0"},
                   [this](redisReply* r) {
                     read_in_flight_ = false;
                     if (r == nullptr) return;
                     if (r->type == REDIS_REPLY_ERROR) {
                       LogWarn("reading own pending entries failed; retrying at the next heartbeat",
                               {{"error", ReplyString(r)}});
                       return;
                     }
                     own_pending_scan_ = false;
                     if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->elements == 2) {
                       redisReply* entries = r->element[0]->element[1];
                       size_t fresh = 0;
                       for (size_t i = 0; i < entries->elements; ++i) {
                         fresh += inflight_entries_.count(ReplyString(entries->element[i]->element[0])) == 0;
                       }
                       if (fresh > 0) LogInfo("recovering own pending entries", {{"count", static_cast<uint64_t>(fresh)}});
                       HandleEntries(entries);
                       // A full batch may mean more; entries we hold are skipped, so this ends.
                       if (fresh == kOwnPendingBatch) own_pending_scan_ = true;
                     }
                     MaybeRead();
                   });
}

void Daemon::HandleEntries(redisReply* entries) {
  if (entries == nullptr || entries->type != REDIS_REPLY_ARRAY) return;
  for (size_t i = 0; i < entries->elements; ++i) {
    redisReply* item = entries->element[i];
    if (item->type != REDIS_REPLY_ARRAY || item->elements < 2) continue;
    Entry e;
    e.id = ReplyString(item->element[0]);
    if (inflight_entries_.count(e.id)) continue;  // already ours and being handled
    redisReply* fields = item->element[1];
    if (fields->type != REDIS_REPLY_ARRAY) {
      e.deleted = true;
    } else {
      for (size_t j = 0; j + 1 < fields->elements; j += 2) {
        e.fields[ReplyString(fields->element[j])] = ReplyString(fields->element[j + 1]);
      }
    }
    Dispatch(std::move(e));
  }
}

void Daemon::Dispatch(Entry e) {
  if (e.deleted) {
    Ack(e.id);
    return;
  }
  inflight_entries_.insert(e.id);
  std::string job_id = e.fields.count("id") ? e.fields["id"] : "";
  bool id_ok = ValidJobId(job_id);
  if (!id_ok) job_id = "entry-" + e.id;
  size_t total = 0;
  for (const auto& [k, v] : e.fields) total += k.size() + v.size();
  if (total > config_.max_payload_bytes) {
    Reject(job_id, e, ErrorCode::kTooLarge, "stream entry is " + std::to_string(total) + " bytes; the limit is " +
                                                 std::to_string(config_.max_payload_bytes), true);
    return;
  }
  auto it = e.fields.find("job");
  if (it == e.fields.end()) {
    Reject(job_id, e, ErrorCode::kBadPayload, "stream entry has no 'job' field", true);
    return;
  }
  if (!id_ok) {
    Reject(job_id, e, ErrorCode::kBadField, "the entry's 'id' field is missing or not a valid job id (PROTOCOL.md section 1)", true);
    return;
  }
  auto decoded = DecodeJob(it->second, config_.limits);
  if (auto* err = std::get_if<JobError>(&decoded)) {
    Reject(job_id, e, err->code, err->message, err->code == ErrorCode::kBadPayload);
    return;
  }
  JobSpec spec = std::move(std::get<JobSpec>(decoded));
  if (spec.id != job_id) {
    Reject(job_id, e, ErrorCode::kBadField, "the payload's id '" + spec.id + "' differs from the entry's id field", false);
    return;
  }
  int tmpl = TemplateFor(spec);
  if (tmpl < 0) {
    Reject(job_id, e, ErrorCode::kBadField, "unknown template '" + spec.template_name + "'", false);
    return;
  }
  uint32_t t = static_cast<uint32_t>(tmpl);
  if (spec.code && spec.runtime != config_.templates[t].sandbox.runtime &&
      SourceArgv(*FindRuntime(spec.runtime), *spec.code).empty()) {
    Reject(job_id, e, ErrorCode::kTooLarge,
           "code: " + std::to_string(spec.code->size()) + " bytes of " + spec.runtime + " in template '" +
               config_.templates[t].name + "', which does not keep " + spec.runtime +
               " warm, must go on a command line (at most " + std::to_string(kMaxExecString - 1) + " bytes)",
           false);
    return;
  }
  Slot* slot = ReadySlot(t);
  if (slot == nullptr) {
    // The pool is empty: the job waits for the next sandbox of its template (never a path with
    // less isolation), and the pool grows if the budget allows.
    if (e.waiting_since_us == 0) {
      e.waiting_since_us = MonotonicUs();
      metrics_.PoolMiss(pool_metrics_[t]);
      ++demand_[t].arrivals_since_tick;
      GrowPool(t, "miss");
    }
    backlog_[t].push_back(std::move(e));  // stays in inflight_entries_, so its lease is refreshed
    return;
  }
  if (e.waiting_since_us == 0) {
    metrics_.PoolHit(pool_metrics_[t]);
    ++demand_[t].arrivals_since_tick;
    metrics_.ObservePoolWait(pool_metrics_[t], 0);
  } else {
    metrics_.ObservePoolWait(pool_metrics_[t], static_cast<double>(MonotonicUs() - e.waiting_since_us) / 1e6);
  }
  metrics_.JobReceived();
  Claim(slot, std::move(spec), std::move(e));
}

void Daemon::Claim(Slot* slot, JobSpec spec, Entry e) {
  slot->Reserve();
  UpdateWorkerGauges();
  std::string job_id = spec.id;
  std::string entry = e.id;
  uint64_t max_attempts = uint64_t{spec.retries} + 1;
  auto shared_spec = std::make_shared<JobSpec>(std::move(spec));
  bool retry_own = unsure_claims_.erase(entry) > 0;
  bool sent = cmd_->Command(
      {"EVAL", kClaimScript, "2", keys_.Job(job_id), keys_.Result(job_id), entry, config_.consumer,
       std::to_string(WallMs()), std::to_string(config_.result_ttl_s), std::to_string(max_attempts),
       retry_own ? "1" : "0"},
      [this, slot, shared_spec, entry, job_id](redisReply* r) {
        if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
          // Unknown whether the claim happened: leave the entry pending; the own-pending scan
          // after reconnecting runs it (or finds it claimed).
          if (r != nullptr) LogWarn("claim failed", {{"job", job_id}, {"error", ReplyString(r)}});
          unsure_claims_.insert(entry);
          inflight_entries_.erase(entry);
          own_pending_scan_ = true;
          slot->Release();
          return;
        }
        std::string verdict = ReplyString(r->element[0]);
        uint32_t attempt = static_cast<uint32_t>(std::strtoul(ReplyString(r->element[1]).c_str(), nullptr, 10));
        if (verdict == "run" && cancelled_unstarted_.erase(job_id)) verdict = "cancelled";
        if (verdict == "run") {
          SlotJob job;
          job.spec = std::move(*shared_spec);
          job.entry = entry;
          job.attempt = attempt;
          int64_t wait_ms = WallMs() - EntryMs(entry);
          job.queue_wait_us = wait_ms > 0 ? static_cast<uint64_t>(wait_ms) * 1000 : 0;
          job.cpu_time_ms = job.spec.cpu_time_ms ? job.spec.cpu_time_ms : config_.sandbox.cpu_time_ms;
          const SandboxConfig& tc = config_.templates[slot->template_index()].sandbox;
          job.cpu_time_ms = job.spec.cpu_time_ms ? job.spec.cpu_time_ms : tc.cpu_time_ms;
          job.memory_bytes = job.spec.memory_bytes ? job.spec.memory_bytes : tc.cgroup.memory_bytes;
          job.pids = job.spec.pids ? job.spec.pids : tc.cgroup.pids;
          metrics_.ObserveQueueWait(static_cast<double>(job.queue_wait_us) / 1e6);
          if (attempt > 1) metrics_.RecoveredJob("retried");
          running_[job_id] = slot;
          slot->Start(std::move(job));
          return;
        }
        slot->Release();
        JobResult res;
        res.id = job_id;
        res.attempt = attempt;
        if (verdict == "cancelled") {
          res.outcome = Outcome::kCancelled;
          res.error = JobError{ErrorCode::kCancelled, "cancelled by a client before it started"};
          Finish(std::move(res), entry, 0);
        } else if (verdict == "lost") {
          res.outcome = Outcome::kWorkerLost;
          res.error = JobError{ErrorCode::kWorkerLost, "the daemon running this job died and no retry was left"};
          metrics_.RecoveredJob("lost");
          Finish(std::move(res), entry, 0);
        } else {
          LogDebug("dropping entry", {{"job", job_id}, {"entry", entry}, {"verdict", verdict}});
          Ack(entry);
        }
      });
  if (!sent) {
    inflight_entries_.erase(entry);
    own_pending_scan_ = true;
    slot->Release();
  }
}

void Daemon::Reject(const std::string& job_id, const Entry& e, ErrorCode code, std::string message, bool dead_letter) {
  const std::string& entry = e.id;
  LogInfo("job rejected", {{"job", job_id}, {"code", std::string(ErrorCodeName(code))}, {"error", message}});
  metrics_.JobReceived();
  metrics_.JobRejected(ErrorCodeName(code));
  if (dead_letter) {
    // The raw payload, cut at 64 KiB (the stream keeps the last ~10,000 dead letters).
    constexpr size_t kRawMax = 64 << 10;
    auto job = e.fields.find("job");
    std::string raw = job == e.fields.end() ? std::string() : job->second.substr(0, kRawMax);
    size_t raw_bytes = job == e.fields.end() ? 0 : job->second.size();
    cmd_->Command({"XADD", keys_.Dead(), "MAXLEN", "~", "10000", "*", "entry", entry, "id", job_id, "reason",
                   std::string(ErrorCodeName(code)), "message", message, "raw", raw, "raw_bytes",
                   std::to_string(raw_bytes)},
                  [](redisReply*) {});
  }
  JobResult r;
  r.id = job_id;
  r.outcome = Outcome::kError;
  r.error = JobError{code, std::move(message)};
  Finish(std::move(r), entry, 0);
}

void Daemon::Finish(JobResult result, const std::string& entry, uint64_t seq) {
  result.worker = config_.consumer;
  LogDebug("job finished", {{"job", result.id}, {"outcome", std::string(OutcomeName(result.outcome))}});
  PendingFinish f;
  f.job_id = result.id;
  f.entry = entry;
  f.attempt = std::to_string(result.attempt);
  f.event = EncodeExitedEvent(seq, result);
  f.result = EncodeResult(result);
  metrics_.JobCompleted(OutcomeName(result.outcome));
  SendFinish(std::move(f));
}

void Daemon::SendFinish(PendingFinish f) {
  if (!cmd_->connected()) {
    pending_finishes_.push_back(std::move(f));
    return;
  }
  std::vector<std::string> args = {"EVAL", kFinishScript, "4", keys_.Job(f.job_id), keys_.Result(f.job_id), stream_,
                                   keys_.Out(f.job_id), f.entry, config_.consumer, f.attempt, f.result,
                                   std::to_string(config_.result_ttl_s), f.event, std::string(Keys::kGroup)};
  auto shared = std::make_shared<PendingFinish>(std::move(f));
  cmd_->Command(args, [this, shared](redisReply* r) {
    if (r == nullptr) {
      // Lost with the connection: unknown whether it ran; running it again is harmless
      // (the script is idempotent for the same consumer and attempt).
      pending_finishes_.push_back(std::move(*shared));
      return;
    }
    std::string verdict = ReplyString(r);
    if (r->type == REDIS_REPLY_ERROR) {
      LogError("storing a result failed", {{"job", shared->job_id}, {"error", verdict}});
      pending_finishes_.push_back(std::move(*shared));
      return;
    }
    if (verdict == "dup") Ack(shared->entry);
    if (verdict == "fenced") LogWarn("result discarded: another daemon took the job over", {{"job", shared->job_id}});
    inflight_entries_.erase(shared->entry);
    MaybeExit();
  });
}

void Daemon::Ack(const std::string& entry) {
  inflight_entries_.erase(entry);
  cmd_->Command({"XACK", stream_, std::string(Keys::kGroup), entry}, [](redisReply*) {});
  cmd_->Command({"XDEL", stream_, entry}, [](redisReply*) {});
}

void Daemon::Publish(const std::string& job_id, std::string event) {
  // At-most-once by design (PROTOCOL.md section 6): dropped while Redis is away.
  cmd_->Command({"PUBLISH", keys_.Out(job_id), std::move(event)}, [](redisReply*) {});
}

void Daemon::OnCancel(const std::string& job_id) {
  auto it = running_.find(job_id);
  if (it == running_.end()) {
    if (cancelled_unstarted_.size() > 10000) cancelled_unstarted_.clear();
    cancelled_unstarted_.insert(job_id);
    return;
  }
  LogInfo("cancelling job", {{"job", job_id}});
  it->second->Kill(KillReason::kCancel);
}

void Daemon::OnHeartbeatTimer(evutil_socket_t, short, void* arg) { static_cast<Daemon*>(arg)->Heartbeat(); }

void Daemon::Heartbeat() {
  ++ticks_;
  UpdateWorkerGauges();
  if (!cmd_->connected()) return;
  // Anything that failed on an error reply (not a lost connection) is retried from here.
  if (!group_ready_) CreateGroup();
  if (!pending_finishes_.empty()) FlushPendingFinishes();
  MaybeRead();
  size_t ready = 0, busy = 0;
  for (auto& s : slots_) {
    ready += s->state() == Slot::State::kReady;
    busy += s->state() == Slot::State::kRunning || s->state() == Slot::State::kReserved;
  }
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(9);
  pk.pack("v"), pk.pack(1);
  pk.pack("consumer"), pk.pack(config_.consumer);
  pk.pack("pid"), pk.pack(static_cast<int64_t>(::getpid()));
  pk.pack("queue"), pk.pack(config_.queue);
  pk.pack("slots"), pk.pack(static_cast<uint64_t>(slots_.size()));
  pk.pack("ready"), pk.pack(static_cast<uint64_t>(ready));
  pk.pack("busy"), pk.pack(static_cast<uint64_t>(busy));
  pk.pack("draining"), pk.pack(draining_);
  pk.pack("started_ms"), pk.pack(started_ms_);
  cmd_->Command({"SET", keys_.Daemon(config_.consumer), std::string(buf.data(), buf.size()), "PX",
                 std::to_string(3 * config_.heartbeat_ms)},
                [](redisReply*) {});
  if (!inflight_entries_.empty()) {
    // Refresh the idle time of everything we hold, so XAUTOCLAIM elsewhere leaves it alone.
    std::vector<std::string> args = {"XCLAIM", stream_, std::string(Keys::kGroup), config_.consumer, "0"};
    args.insert(args.end(), inflight_entries_.begin(), inflight_entries_.end());
    args.push_back("JUSTID");
    cmd_->Command(args, [](redisReply*) {});
  }
  cmd_->Command({"XINFO", "GROUPS", stream_}, [this](redisReply* r) {
    if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return;
    for (size_t i = 0; i < r->elements; ++i) {
      redisReply* g = r->element[i];
      double pending = 0, lag = 0;
      bool ours = false;
      for (size_t j = 0; j + 1 < g->elements; j += 2) {
        std::string k = ReplyString(g->element[j]);
        if (k == "name") ours = ReplyString(g->element[j + 1]) == Keys::kGroup;
        if (k == "pending") pending = static_cast<double>(g->element[j + 1]->integer);
        if (k == "lag" && g->element[j + 1]->type == REDIS_REPLY_INTEGER) lag = static_cast<double>(g->element[j + 1]->integer);
      }
      if (ours) metrics_.SetQueueDepth(pending, lag);
    }
  });
  ResizePools();
  // Reclaim a dead daemon's entries a few times per lease.
  uint64_t every = std::max<uint64_t>(1, config_.lease_ms / config_.heartbeat_ms / 3);
  if (ticks_ % every == 0) Reclaim();
}

void Daemon::Reclaim() {
  if (draining_ || !group_ready_) return;
  size_t ready = ReadCapacity();
  if (ready == 0) return;
  cmd_->Command({"XAUTOCLAIM", stream_, std::string(Keys::kGroup), config_.consumer, std::to_string(config_.lease_ms),
                 "0-0", "COUNT", std::to_string(ready)},
                [this](redisReply* r) {
                  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements < 2) return;
                  redisReply* entries = r->element[1];
                  if (entries->elements > 0) {
                    LogInfo("reclaimed entries of a dead daemon", {{"count", static_cast<uint64_t>(entries->elements)}});
                  }
                  HandleEntries(entries);
                  if (r->elements >= 3) {
                    for (size_t i = 0; i < r->element[2]->elements; ++i) Ack(ReplyString(r->element[2]->element[i]));
                  }
                });
}

void Daemon::OnChildSignal(evutil_socket_t, short, void* arg) { static_cast<Daemon*>(arg)->ReapChildren(); }

// Our children are the spawner and, as subreaper, any orphan of our tree.
void Daemon::ReapChildren() {
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG | __WALL);
    if (pid <= 0) return;
    if (pid == spawner_.pid) {
      spawner_.pid = -1;
      LogError("the spawner exited; shutting down", {{"status", status}});
      exit_code_ = 1;
      Drain("spawner lost");
    }
  }
}

void Daemon::OnSignal(evutil_socket_t sig, short, void* arg) {
  auto* self = static_cast<Daemon*>(arg);
  if (self->draining_ && sig == SIGINT) {
    LogWarn("second interrupt: stopping now");
    self->exit_code_ = 1;
    event_base_loopexit(self->base_, nullptr);
    return;
  }
  self->Drain(sig == SIGTERM ? "SIGTERM" : "SIGINT");
}

void Daemon::Drain(const char* why) {
  if (draining_) return;
  draining_ = true;
  LogInfo("draining", {{"why", why}, {"running", static_cast<uint64_t>(running_.size())},
                       {"grace_ms", config_.grace_ms}});
  grace_ev_ = evtimer_new(base_, &Daemon::OnGraceTimer, this);
  struct timeval tv = {static_cast<time_t>(config_.grace_ms / 1000),
                       static_cast<suseconds_t>((config_.grace_ms % 1000) * 1000)};
  evtimer_add(grace_ev_, &tv);
  // Entries waiting for a slot are not ours to run any more: another daemon (or our restart)
  // gets them through the pending list, unclaimed, so they run normally. Closing the reader
  // drops a reply that may be on its way for the same reason.
  for (auto& b : backlog_) b.clear();
  if (reader_) reader_->Close();
  MaybeExit();
}

void Daemon::OnGraceTimer(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<Daemon*>(arg);
  if (!self->running_.empty()) {
    LogWarn("grace period over: killing running jobs", {{"count", static_cast<uint64_t>(self->running_.size())}});
    for (auto& [id, slot] : self->running_) slot->Kill(KillReason::kShutdown);
    // Give the kills and result writes a moment; leave regardless after that.
    struct timeval tv = {2, 0};
    event_base_loopexit(self->base_, &tv);
    return;
  }
  event_base_loopexit(self->base_, nullptr);
}

void Daemon::MaybeExit() {
  if (!draining_) return;
  bool busy = !running_.empty();
  for (auto& s : slots_) busy |= s->state() == Slot::State::kReserved;
  if (busy) return;
  if (!pending_finishes_.empty() && cmd_->connected()) return;  // still being written
  if (!pending_finishes_.empty()) {
    LogWarn("leaving with results not stored (Redis unreachable); their entries stay pending",
            {{"count", static_cast<uint64_t>(pending_finishes_.size())}});
  }
  // Let queued replies (the last results) flush before leaving.
  struct timeval tv = {0, 100000};
  event_base_loopexit(base_, &tv);
}

void Daemon::Stop() {
  for (auto& s : slots_) s->Shutdown();
  if (cmd_) cmd_->Close();
  if (reader_) reader_->Close();
  if (sub_) sub_->Close();
  spawner_channel_.Close();
  if (spawner_.pid > 0) ::kill(spawner_.pid, SIGKILL);
  // Keepers die with the spawner and sandboxes with their keepers (PDEATHSIG); as subreaper we
  // inherit and reap all of them, so when waitpid says there is no child left, nothing of ours
  // is left on the host.
  int64_t deadline = MonotonicUs() + 10 * 1000000;
  for (;;) {
    pid_t pid = ::waitpid(-1, nullptr, WNOHANG | __WALL);
    if (pid < 0 && errno == ECHILD) break;
    if (pid == 0) {
      if (MonotonicUs() > deadline) {
        LogWarn("processes of the pool still running after 10 s");
        break;
      }
      ::usleep(2000);
    }
  }
  for (const auto& [ctrl, dir] : layout_.instance_dirs) {
    for (uint32_t i = 0; i < slots_.size(); ++i) {
      std::string slot_dir = dir + "/slot-" + std::to_string(i);
      for (int tries = 0; tries < 100 && ::rmdir(slot_dir.c_str()) != 0 && errno == EBUSY; ++tries) ::usleep(20000);
    }
    if (layout_.mode == CgroupMode::kV1) ::rmdir(dir.c_str());
  }
  LogInfo("sandpoold stopped");
}

}  // namespace sandpool
