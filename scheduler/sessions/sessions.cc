#include "scheduler/sessions/sessions.h"

#include "scheduler/net/net_setup.h"
#include "scheduler/net/port_exposure.h"
#include "worker/sandbox/netns_setup.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <msgpack.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/clock.h"
#include "common/log.h"
#include "queue/msgpack_read.h"
#include "scheduler/redis/liveness.h"
#include "scheduler/redis/scripts.h"

namespace sandpool {

const char* Sessions::StateName(State s) {
  switch (s) {
    case State::kCreating: return "creating";
    case State::kRunning: return "running";
    case State::kStopping: return "stopping";
    case State::kStopped: return "stopped";
    case State::kDestroying: return "destroying";
    case State::kError: return "error";
  }
  return "error";
}

Sessions::Sessions(struct event_base* base, const DaemonConfig& config, const Keys& keys, RedisAsync* cmd,
                   JobLedger* ledger, SessionHost* host, Metrics* metrics, std::function<void()> on_idle,
                   const Clock& clock)
    : base_(base), config_(config), keys_(keys), cmd_(cmd), ledger_(ledger), host_(host), clock_(clock), metrics_(metrics),
      on_idle_(std::move(on_idle)), store_(config.state_dir), registry_(cmd, keys, config),
      answers_(config, ledger, metrics) {
  limits_.default_disk_bytes = config_.session_disk_bytes;
  limits_.max_disk_bytes = std::max(config_.max_session_disk_bytes, config_.session_disk_bytes);
  limits_.min_disk_bytes = std::min<uint64_t>(64ull << 20, limits_.max_disk_bytes);
  snapshots_ = std::make_unique<Snapshots>(config_, keys_, cmd_);
  lost_hosts_ = std::make_unique<LostHosts>(cmd_, keys_, config_, limits_, ledger_, &registry_, &answers_);
  own_stream_ = keys_.SessionStream(config_.queue, config_.consumer);
  intake_ = keys_.SessionIntake(config_.queue);
  reader_conn_ = std::make_unique<RedisAsync>(
      base_, config_.redis, "sessions",
      RedisAsync::Hooks{[this] { reader_->OnReaderConnected(); }, [this] { reader_->OnReaderDisconnected(); }},
      keys_.ClientName(config_.consumer, "sessions"));
  // Both streams block on the sessions connection; neither is reclaimed (a lost host's
  // operations are answered by lost_hosts.h, never run elsewhere).
  std::vector<StreamReader::StreamSpec> streams = {
      {own_stream_, [] { return kReadBatch; }, true, false, ""},
      {intake_, [this] { return HasRoom() ? kReadBatch : 0; }, true, false, ""}};
  StreamReader::Hooks reading;
  reading.on_entries = [this](std::vector<StreamEntry> entries) {
    for (StreamEntry& e : entries) {
      if (e.deleted) e.fields.clear();
      if (e.stream == intake_) OnIntakeEntry(e.id, e.fields);
      else OnOwnEntry(e.id, e.fields);
    }
  };
  // Being claimed or served here: claiming it again would answer a running operation worker_lost.
  reading.holds = [this](const std::string& stream, const std::string& entry) {
    return stream == own_stream_ && own_entries_.count(entry) > 0;  // own_entries_ are the own stream's
  };
  reading.may_read = [this] { return reconciled_ && !draining_; };
  reader_ = std::make_unique<StreamReader>(reader_conn_.get(), cmd_, keys_, config_, std::move(streams),
                                           std::move(reading));
  spares_ = std::make_unique<SessionSpares>(
      config_, limits_, host_, store_,
      SessionSpares::Hooks{[this](std::shared_ptr<std::string> owner, uint32_t t, const SessionMeta& m,
                                  const std::string& dir, bool fresh, SessionHost::KeeperHandle k, std::string* error) {
                             return StartSandbox(std::move(owner), t, m, dir, fresh, std::move(k), error);
                           },
                           [this](std::unique_ptr<Session> s) { Collect(std::move(s)); }});
  collect_ev_ = evtimer_new(base_, [](evutil_socket_t, short, void* arg) {
    auto* self = static_cast<Sessions*>(arg);
    auto dead = std::move(self->graveyard_);
    self->graveyard_.clear();
    dead.clear();
  }, this);
}

Sessions::~Sessions() {
  Close();
  graveyard_.clear();
  event_free(collect_ev_);
}

void Sessions::Close() {
  reader_conn_->Close();
  spares_->Close();
  for (auto& [sid, e] : sessions_) {
    if (e.session) Collect(std::move(e.session));
  }
}

// ---- Start, files (session_store.h) ---------------------------------------------------------------

void Sessions::OnCommandDisconnected() { reader_->OnCommandDisconnected(); }

Status Sessions::Start() {
  if (Status s = store_.Init(); !s.ok()) return s;
  if (Status s = snapshots_->Start(); !s.ok()) return s;
  for (SessionMeta& m : store_.LoadAll(config_)) {
    Entry& e = sessions_[m.id];
    e.template_index = static_cast<uint32_t>(FindTemplate(config_, m.base));
    e.state = State::kStopped;
    e.last_used_ms = m.created_ms;
    e.meta = std::move(m);
  }
  reader_conn_->Connect();
  return Status::Ok();
}

// ---- Records -------------------------------------------------------------------------------------

int64_t Sessions::TimeoutAt(const Entry& e) const {
  if (e.state != State::kRunning && e.state != State::kCreating) return 0;
  int64_t idle = e.meta.idle_timeout_ms ? e.last_used_ms + static_cast<int64_t>(e.meta.idle_timeout_ms) : 0;
  int64_t life = e.meta.max_lifetime_ms ? e.meta.created_ms + static_cast<int64_t>(e.meta.max_lifetime_ms) : 0;
  if (idle == 0) return life;
  if (life == 0) return idle;
  return std::min(idle, life);
}

SessionInfo Sessions::InfoOf(const Entry& e) const {
  SessionInfo i;
  i.session = e.meta.id;
  i.state = StateName(e.state);
  i.template_name = e.meta.template_name;
  i.host = config_.consumer;
  i.created_ms = e.meta.created_ms;
  i.last_used_ms = e.last_used_ms;
  i.timeout_at_ms = TimeoutAt(e);
  i.labels = e.meta.labels;
  i.ephemeral = e.meta.ephemeral;
  i.memory_limit_bytes = e.meta.memory_bytes;
  i.cpus = e.meta.cpus;
  i.disk_limit_bytes = e.meta.disk_bytes;
  i.processes = e.session ? e.session->processes_running() : 0;
  i.error = e.error;
  const TemplateConfig& tc = config_.templates[e.template_index];
  if (tc.network) {
    auto policy = EffectiveEgress(tc.egress, tc.name, e.meta.Egress());
    if (policy.ok()) i.network = ShowEgress(*policy);
  }
  return i;
}

void Sessions::WriteRecord(Entry& e) {
  e.record_dirty = false;
  if (e.internal) return;
  SessionRecordState rs{StateName(e.state), e.last_used_ms, TimeoutAt(e), e.error};
  registry_.Write(e.meta, rs, [this, sid = e.meta.id](bool written) {
    if (written) return;
    auto it = sessions_.find(sid);
    if (it != sessions_.end()) it->second.record_dirty = true;  // written again at the next heartbeat
  });
}

void Sessions::SetState(Entry& e, State s, std::string error) {
  e.state = s;
  e.error = std::move(error);
  WriteRecord(e);
}

void Sessions::OnCommandConnected() {
  reader_->OnCommandConnected();
  // Records are this host's to keep true: written again on every connect (Redis may have
  // restarted empty, or peers may have marked them lost while we could not reach it).
  if (!reconciled_) {
    Reconcile();
    return;
  }
  for (auto& [sid, e] : sessions_) WriteRecord(e);
}

// Once after start: Redis's view of this host's sessions is made to match its disk.
void Sessions::Reconcile() {
  std::vector<std::string> held;
  for (const auto& [sid, e] : sessions_) held.push_back(sid);
  registry_.Reconcile(
      std::move(held),
      [this](const std::string& sid) {
        // A session a peer destroyed while this host was away: its files go now.
        store_.Remove(sid);
        registry_.Forget(sid);
        sessions_.erase(sid);
      },
      [this] {
        reconciled_ = true;
        for (auto& [sid, e] : sessions_) WriteRecord(e);
        reader_->Read();
      });
}

// ---- Operations --------------------------------------------------------------------------------

void Sessions::Create(Entry& e, Op op) {
  const SessionCreateOptions& c = op.req.create;
  std::string sid = op.req.session;
  SessionMeta& m = e.meta;
  m.id = sid;
  m.template_name = c.template_name;
  m.env = c.env;
  m.labels = c.labels;
  m.idle_timeout_ms = c.idle_timeout_ms.value_or(config_.session_idle_timeout_ms);
  m.max_lifetime_ms = c.max_lifetime_ms.value_or(0);
  m.ephemeral = c.ephemeral;
  m.SetEgress(c.egress);
  m.created_ms = clock_.WallMs();
  e.last_used_ms = m.created_ms;
  e.state = State::kCreating;
  e.create_started_us = clock_.MonotonicUs();
  e.waiting.push_back(std::move(op));
  int t = FindTemplate(config_, m.template_name);
  if (t >= 0) {
    CreateOn(sid, static_cast<uint32_t>(t), "", 0, "");
    return;
  }
  // Not a configured template: a snapshot, fetched first if this host has not got it.
  snapshots_->Ensure(m.template_name, [this, sid](Result<SnapshotMeta> snap) {
    auto it = sessions_.find(sid);
    if (it == sessions_.end() || it->second.state != State::kCreating) return;
    Entry& entry = it->second;
    int base = snap.ok() ? FindTemplate(config_, snap->base) : -1;
    if (!snap.ok() || base < 0) {
      std::string why = !snap.ok() ? snap.status().message() : "its base template " + snap->base + " is not configured here";
      ErrorCode code = !snap.ok() && snap.status().sys_errno() != ENOENT ? ErrorCode::kInternal : ErrorCode::kBadField;
      auto waiting = std::move(entry.waiting);
      sessions_.erase(it);
      registry_.Forget(sid);
      for (Op& w : waiting) AnswerError(w, code, "template: " + why);
      return;
    }
    CreateOn(sid, static_cast<uint32_t>(base), snapshots_->Image(entry.meta.template_name), snap->disk_bytes,
             snap->checksum + "@" + std::to_string(snap->created_ms));
  });
}

void Sessions::CreateOn(const std::string& sid, uint32_t t, const std::string& image, uint64_t snapshot_disk_bytes,
                        const std::string& version) {
  Entry& e = sessions_[sid];
  const SessionCreateOptions& c = e.waiting.front().req.create;
  const TemplateConfig& tc = config_.templates[t];
  SessionMeta& m = e.meta;
  m.base = tc.name;
  m.memory_bytes = c.memory_bytes ? c.memory_bytes : tc.sandbox.cgroup.memory_bytes;
  m.pids = c.pids ? c.pids : tc.sandbox.cgroup.pids;
  m.cpus = c.cpus > 0 ? c.cpus : static_cast<double>(tc.sandbox.cgroup.cpu_quota_us) / 100000.0;
  // A snapshot's disk is its image, of the size it was taken with.
  m.disk_bytes = !image.empty() ? snapshot_disk_bytes : c.disk_bytes ? c.disk_bytes : limits_.default_disk_bytes;
  e.template_index = t;
  if (m.egress) {
    // Asking for a network the template does not have, or more than it allows, fails loudly.
    Status bad = !tc.network ? Status::Error("egress: template '" + tc.name + "' has no network")
                             : EffectiveEgress(tc.egress, tc.name, m.Egress()).status();
    if (!bad.ok()) {
      auto waiting = std::move(e.waiting);
      sessions_.erase(sid);
      registry_.Forget(sid);
      for (Op& w : waiting) AnswerError(w, ErrorCode::kBadField, bad.message());
      return;
    }
  }
  std::string dir = store_.Dir(sid);
  if (auto adopted = spares_->Adopt(m, version)) {
    e.session = std::move(adopted);
    e.budget = true;  // the spare's share of the budget is the session's now
    Status saved = store_.Save(m);
    if (!saved.ok()) {
      StartFailed(e, saved.message());
      return;
    }
    spares_->Make(m.template_name, t, image, m.disk_bytes, version);
    Started(e);
    return;
  }
  if (!TakeBudget(m.memory_bytes)) {
    auto waiting = std::move(e.waiting);
    sessions_.erase(sid);
    registry_.Forget(sid);  // the id is free again: a retry may land on a host with room
    for (Op& w : waiting) AnswerError(w, ErrorCode::kHostFull, "this host has no room for another session");
    return;
  }
  e.budget = true;
  WriteRecord(e);
  Status s = ::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST ? store_.Save(m) : ErrnoStatus("mkdir " + dir);
  if (!s.ok()) {
    StartFailed(e, s.message());
    return;
  }
  LogDebug("session disk being made", {{"session", sid}, {"bytes", m.disk_bytes}, {"from", image}});
  bool fresh = image.empty();
  host_->MakeDisk(dir + "/disk.img", m.disk_bytes, image, [this, sid, fresh](std::string error, uint64_t) {
    auto it = sessions_.find(sid);
    if (it == sessions_.end()) return;
    if (!error.empty()) {
      StartFailed(it->second, "making its disk: " + error);
      return;
    }
    it->second.fresh_disk = fresh;
    Launch(it->second, fresh);
  });
  spares_->Make(m.template_name, t, image, !image.empty() ? m.disk_bytes : limits_.default_disk_bytes, version);
}

void Sessions::Resume(Entry& e) {
  e.state = State::kCreating;
  e.error.clear();
  e.create_started_us = clock_.MonotonicUs();
  if (!TakeBudget(e.meta.memory_bytes)) {
    e.state = State::kStopped;
    auto waiting = std::move(e.waiting);
    e.waiting.clear();
    for (Op& op : waiting) AnswerError(op, ErrorCode::kHostFull, "this host has no room to resume the session now");
    return;
  }
  e.budget = true;
  WriteRecord(e);
  // A disk no sandbox has started on yet (its first start failed) is still laid out first.
  Launch(e, e.fresh_disk);
}

// The hooks of a session sandbox: they follow `owner` (the session id; empty while the sandbox
// is a warm spare of its template), which adoption changes.
Session::Hooks Sessions::HooksFor(std::shared_ptr<std::string> owner, const std::string& spare) {
  Session::Hooks hooks;
  hooks.on_ready = [this, owner, spare](Session&) {
    if (owner->empty()) {
      spares_->Ready(spare);
      return;
    }
    auto found = sessions_.find(*owner);
    if (found != sessions_.end()) Started(found->second);
  };
  hooks.on_start_failed = [this, owner, spare](Session&, const std::string& why) {
    if (owner->empty()) {
      spares_->Drop(spare, why);
      return;
    }
    auto found = sessions_.find(*owner);
    if (found != sessions_.end()) StartFailed(found->second, why);
  };
  hooks.on_ended = [this, owner, spare](Session&, const std::string& why, bool asked) {
    if (owner->empty()) {
      spares_->Drop(spare, why);
      return;
    }
    auto found = sessions_.find(*owner);
    if (found != sessions_.end()) Ended(found->second, why, asked);
  };
  hooks.publish = [this](const std::string& channel, std::string event) {
    cmd_->Command({"PUBLISH", channel, std::move(event)}, [](redisReply*) {});
  };
  hooks.op_channel = [this](std::string_view op_id) { return keys_.Out(op_id); };
  hooks.process_channel = [this, owner](std::string_view pid) { return keys_.ProcessOut(*owner, pid); };
  return hooks;
}

std::unique_ptr<Session> Sessions::StartSandbox(std::shared_ptr<std::string> owner, uint32_t t, const SessionMeta& m,
                                                const std::string& dir, bool fresh, SessionHost::KeeperHandle k,
                                                std::string* error) {
  if (!k.channel.valid()) {
    host_->ReleaseSessionSlot(k.slot);
    *error = "no session keeper could be started";
    return nullptr;
  }
  std::string path = dir + "/disk.img";
  UniqueFd disk(::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
  if (!disk.valid()) {
    host_->ReleaseSessionSlot(k.slot);
    *error = "its disk cannot be opened: " + std::string(std::strerror(errno));
    return nullptr;
  }
  const TemplateConfig& tc = config_.templates[t];
  auto session = std::make_unique<Session>(base_, *owner, config_.consumer, m.env, tc.env, HooksFor(owner, m.template_name));
  SessionStartMsg start;
  start.session = owner->empty() ? "(spare)" : *owner;
  start.fresh = fresh;
  start.memory_bytes = m.memory_bytes;
  start.pids = m.pids;
  start.cpu_quota_us = static_cast<uint64_t>(m.cpus * 100000.0);
  session->Start(std::move(k), std::move(disk), start);
  return session;
}

void Sessions::Launch(Entry& launching, bool fresh) {
  std::string sid = launching.meta.id;
  spares_->TakeKeeper(launching.template_index, [this, sid, fresh](SessionHost::KeeperHandle k) {
    auto it = sessions_.find(sid);
    if (it == sessions_.end() || it->second.state != State::kCreating || it->second.session) {
      host_->ReleaseSessionSlot(k.slot);
      return;
    }
    Entry& e = it->second;
    std::string error;
    e.session = StartSandbox(std::make_shared<std::string>(sid), e.template_index, e.meta, store_.Dir(sid), fresh,
                             std::move(k), &error);
    if (!e.session) StartFailed(e, error);
  });
}

void Sessions::Started(Entry& e) {
  if (e.internal) {
    e.state = State::kRunning;
    if (auto start = std::move(e.job_start)) start(true, "");
    return;
  }
  auto running = [this](Entry& en) {
    double seconds = static_cast<double>(clock_.MonotonicUs() - en.create_started_us) / 1e6;
    LogInfo("session running", {{"session", en.meta.id}, {"seconds", seconds}});
    metrics_->ObserveSessionStart(seconds);
    en.fresh_disk = false;
    SetState(en, State::kRunning);
    auto waiting = std::move(en.waiting);
    en.waiting.clear();
    for (Op& op : waiting) Serve(std::move(op));
  };
  // A session that narrows its template's policy: its slot is narrowed before anything of it
  // runs (the slot's old flows are forgotten off the loop: it is running once that is done).
  const TemplateConfig& tc = config_.templates[e.template_index];
  if (tc.network && network_ && e.session) {
    auto policy = EffectiveEgress(tc.egress, tc.name, e.meta.Egress());
    if (!policy.ok()) {
      StartFailed(e, "its egress policy could not be applied: " + policy.status().message());  // never runs wider
      return;
    }
    if (!(*policy == tc.egress)) {
      uint32_t slot = e.session->keeper_slot();
      e.narrowed_slot = slot;
      network_->Narrow(e.template_index, slot, *policy, [this, id = e.meta.id, slot, running](Status narrowed) {
        auto it = sessions_.find(id);
        // Ended meanwhile (its end reset the slot) or gone: nothing to start.
        if (it == sessions_.end() || it->second.state != State::kCreating || it->second.narrowed_slot != slot) return;
        Entry& en = it->second;
        if (!narrowed.ok()) {
          network_->Reset(en.template_index, slot);
          en.narrowed_slot.reset();
          StartFailed(en, "its egress policy could not be applied: " + narrowed.message());  // never runs wider
          return;
        }
        running(en);
      });
      return;
    }
  }
  running(e);
}

void Sessions::StartFailed(Entry& e, const std::string& why) {
  if (e.internal) {
    if (e.budget) host_->ReturnSessionBudget(e.meta.memory_bytes);
    e.budget = false;
    if (e.session) {
      host_->ReleaseSessionSlot(e.session->keeper_slot());
      Collect(std::move(e.session));
    }
    e.state = State::kError;
    if (auto start = std::move(e.job_start)) start(false, why);
    return;
  }
  LogWarn("session could not start", {{"session", e.meta.id}, {"error", why}});
  if (e.budget) host_->ReturnSessionBudget(e.meta.memory_bytes);
  e.budget = false;
  if (e.session) {
    host_->ReleaseSessionSlot(e.session->keeper_slot());
    Collect(std::move(e.session));
  }
  SetState(e, State::kError, why);
  auto waiting = std::move(e.waiting);
  e.waiting.clear();
  for (Op& op : waiting) {
    if (op.req.op == SessionOp::kCreate) AnswerError(op, ErrorCode::kSandboxFailed, "the session could not start: " + why);
    else Serve(std::move(op));
  }
}

void Sessions::Ended(Entry& e, const std::string& why, bool asked) {
  if (!asked) LogWarn("session sandbox ended", {{"session", e.meta.id}, {"why", why}});
  if (exposure_) exposure_->Clear(e.meta.id);  // its ports go with its sandbox
  if (e.narrowed_slot && network_) network_->Reset(e.template_index, *e.narrowed_slot);
  e.narrowed_slot.reset();
  if (e.budget) host_->ReturnSessionBudget(e.meta.memory_bytes);
  e.budget = false;
  if (e.session) {
    if (auto keeper = e.session->TakeEndedKeeper()) spares_->KeepKeeper(e.template_index, std::move(*keeper));
    else host_->ReleaseSessionSlot(e.session->keeper_slot());
    Collect(std::move(e.session));
  }
  std::string sid = e.meta.id;
  SetState(e, State::kStopped, asked ? "" : "its sandbox ended: " + why);
  auto after = std::move(e.after_end);
  e.after_end.clear();
  for (auto& f : after) f();
  // `e` may be gone now (destroyed by one of those).
  auto it = sessions_.find(sid);
  if (it != sessions_.end()) {
    auto waiting = std::move(it->second.waiting);
    it->second.waiting.clear();
    for (Op& op : waiting) Serve(std::move(op));
  }
  if (on_idle_) on_idle_();
}

void Sessions::StopSession(Entry& e, std::function<void()> then) {
  if (then) e.after_end.push_back(std::move(then));
  if (e.state != State::kRunning || !e.session) return;
  SetState(e, State::kStopping);
  e.session->Stop();
}

void Sessions::Destroy(Entry& e, std::optional<Op> op) {
  std::string sid = e.meta.id;
  switch (e.state) {
    case State::kCreating:
    case State::kStopping:
      if (op) e.waiting.push_back(std::move(*op));
      return;
    case State::kDestroying:
      if (op) AnswerError(*op, ErrorCode::kSessionBusy, "the session is being destroyed");
      return;
    case State::kRunning: {
      auto shared = std::make_shared<std::optional<Op>>(std::move(op));
      StopSession(e, [this, sid, shared] {
        auto it = sessions_.find(sid);
        if (it != sessions_.end()) Destroy(it->second, std::move(*shared));
      });
      SetState(e, State::kDestroying);
      return;
    }
    case State::kStopped:
    case State::kError:
      break;
  }
  store_.Remove(sid);
  if (!e.internal) registry_.Forget(sid);
  auto waiting = std::move(e.waiting);
  sessions_.erase(sid);
  LogInfo("session destroyed", {{"session", sid}});
  if (op) AnswerOp(*op, OpAnswer{std::nullopt, "\x80"});
  for (Op& w : waiting) Serve(std::move(w));
}

// ---- Cancels, drain ----------------------------------------------------------------------------

bool Sessions::Cancel(const std::string& op_id) {
  auto it = op_session_.find(op_id);
  if (it == op_session_.end()) return false;
  auto s = sessions_.find(it->second);
  if (s == sessions_.end() || !s->second.session) return false;
  LogInfo("cancelling session command", {{"op", op_id}, {"session", it->second}});
  return s->second.session->Cancel(op_id);
}

std::vector<std::string> Sessions::RunningOps() const {
  std::vector<std::string> ids;
  for (const auto& [id, sid] : op_session_) ids.push_back(id);
  return ids;
}

void Sessions::Drain() {
  draining_ = true;
  spares_->Drain();
  if (ops_in_flight_ == 0) StopAll();
}

void Sessions::StopAll() {
  for (auto& [sid, e] : sessions_) {
    if (e.state == State::kRunning) {
      LogInfo("stopping session (daemon draining); its files are kept", {{"session", sid}});
      StopSession(e, nullptr);
    }
  }
}

bool Sessions::Idle() const {
  if (ops_in_flight_ > 0) return false;
  for (const auto& [sid, e] : sessions_) {
    if (e.session) return false;
  }
  return true;
}

void Sessions::Collect(std::unique_ptr<Session> s) {
  graveyard_.push_back(std::move(s));
  struct timeval now = {0, 0};
  evtimer_add(collect_ev_, &now);
}

// ---- Heartbeat: timeouts, records, peers -------------------------------------------------------

void Sessions::Heartbeat() {
  int64_t now = clock_.WallMs();
  std::vector<std::string> due;
  size_t counts[6] = {0, 0, 0, 0, 0, 0};
  for (auto& [sid, e] : sessions_) {
    ++counts[static_cast<int>(e.state)];
    if (e.state != State::kRunning || !e.session || e.internal) continue;
    // A session running a command is in use, however long the command takes.
    if (!e.session->RunningCommands().empty()) {
      e.last_used_ms = now;
      e.record_dirty = true;
    }
    int64_t at = TimeoutAt(e);
    if (at != 0 && at <= now) due.push_back(sid);
  }
  for (int s = 0; s < 6; ++s) metrics_->SetSessions(StateName(static_cast<State>(s)), static_cast<double>(counts[s]));
  for (const std::string& sid : due) {
    Entry& e = sessions_[sid];
    LogInfo(e.meta.ephemeral ? "destroying idle session" : "stopping idle session", {{"session", sid}});
    if (e.meta.ephemeral) Destroy(e, std::nullopt);
    else StopSession(e, nullptr);
  }
  if (draining_ && ops_in_flight_ == 0) StopAll();
  if (!cmd_->connected()) return;
  for (auto& [sid, e] : sessions_) {
    if (e.record_dirty) WriteRecord(e);
  }
  reader_->RescanOwn([this](const std::string& stream) { return ledger_->TakeRescan(stream); });
  reader_->Heartbeat();
  lost_hosts_->Heartbeat();
}

}  // namespace sandpool
