#include "scheduler/daemon/daemon.h"

#include "scheduler/daemon/heartbeat_fields.h"
#include "scheduler/jobs/claim_settle.h"
#include "scheduler/net/net_setup.h"
#include "scheduler/daemon/sd_notify.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <msgpack.hpp>

#include <algorithm>
#include <cerrno>

#include "common/clock.h"
#include "common/log.h"
#include "scheduler/redis/scripts.h"

namespace sandpool {
namespace {

// A Redis that has not answered a command for this long is not serving (paused, stuck):
// /readyz says so.
constexpr int64_t kRedisStallMs = 3000;

}  // namespace

Daemon::Daemon(const DaemonConfig& config, struct event_base* base, SpawnerHandle spawner, CgroupLayout layout)
    : config_(config), base_(base), spawner_(std::move(spawner)), layout_(std::move(layout)), keys_(config.prefix) {}

Daemon::~Daemon() {
  // The connections close first (Stop does too; a Daemon destroyed without it must not differ):
  // the replies they still owe run, with nothing, while the ledger, reader and sessions they call
  // back into still exist. Members are destroyed in the reverse order of declaration, which
  // would free those first.
  for (RedisAsync* c : {cmd_.get(), reader_.get(), sub_.get()}) {
    if (c != nullptr) c->Close();
  }
  for (struct event* e : signal_evs_) event_free(e);
  if (heartbeat_ev_) event_free(heartbeat_ev_);
  if (grace_ev_) event_free(grace_ev_);
}

Status Daemon::Start() {
  started_ms_ = WallMs();
  waiting_.resize(config_.templates.size());
  forwarded_.assign(config_.templates.size(), ForwardMark{});
  metrics_.AddQueue(config_.queue);
  loop_lag_ = std::make_unique<LoopLagProbe>(base_, &metrics_);
  if (network_) SP_RETURN_IF_ERROR(network_->Start(base_, &metrics_));
  if (config_.metrics_addr != "off" && !config_.metrics_addr.empty()) {
    auto server = MetricsServer::Start(base_, config_.metrics_addr, &metrics_, [this](std::string* why) {
      if (draining_) { *why = "draining"; return false; }
      if (!RedisResponsive(why)) return false;
      if (pools_->ReadyCount() == 0 && running_.empty()) { *why = "no sandbox ready"; return false; }
      return true;
    });
    if (!server.ok()) return server.status().Prefixed("metrics endpoint " + config_.metrics_addr);
    http_ = std::move(server.value());
    LogInfo("metrics endpoint listening", {{"addr", config_.metrics_addr}, {"port", http_->BoundPort()}});
  }

  for (int sig : {SIGTERM, SIGINT, SIGCHLD}) {
    struct event* e = evsignal_new(base_, sig, sig == SIGCHLD ? &Daemon::OnChildSignal : &Daemon::OnSignal, this);
    evsignal_add(e, nullptr);
    signal_evs_.push_back(e);
  }

  cmd_ = std::make_unique<RedisAsync>(
      base_, config_.redis, "commands",
      RedisAsync::Hooks{[this] {
                          metrics_.SetRedisConnected(true);
                          stream_reader_->OnCommandConnected();
                          ledger_->FlushPending();  // results that waited for Redis go first
                          sessions_->OnCommandConnected();
                          Heartbeat();
                        },
                        [this] {
                          metrics_.SetRedisConnected(false);
                          metrics_.RedisReconnect();
                          stream_reader_->OnCommandDisconnected();
                          if (sessions_) sessions_->OnCommandDisconnected();
                        },
                        [this](double seconds, const redisReply* r) {
                          metrics_.ObserveRedisCommand(seconds);
                          // A group that exists already is the normal answer to creating it.
                          if (r->type == REDIS_REPLY_ERROR && ReplyString(r).rfind("BUSYGROUP", 0) != 0) metrics_.RedisError();
                        }},
      keys_.ClientName(config_.consumer, "commands"));
  reader_ = std::make_unique<RedisAsync>(
      base_, config_.redis, "reader",
      RedisAsync::Hooks{[this] { stream_reader_->OnReaderConnected(); }, [this] { stream_reader_->OnReaderDisconnected(); }},
      keys_.ClientName(config_.consumer, "reader"));
  sub_ = std::make_unique<RedisAsync>(base_, config_.redis, "subscriber", RedisAsync::Hooks{},
                                      keys_.ClientName(config_.consumer, "subscriber"));
  ledger_ = std::make_unique<JobLedger>(base_, cmd_.get(), keys_, config_, &metrics_);
  StreamReader::Hooks reading;
  reading.on_entries = [this](std::vector<StreamEntry> e) { OnEntries(std::move(e)); };
  reading.holds = [this](const std::string& stream, const std::string& entry) { return ledger_->Holds(stream, entry); };
  reading.on_empty = [this](const std::string& stream) {
    int t = ForwardTemplate(stream);
    if (t >= 0) ClearForwardMark(static_cast<uint32_t>(t));
  };
  stream_reader_ = std::make_unique<StreamReader>(
      reader_.get(), cmd_.get(), keys_, config_,
      StreamReader::JobStreams(keys_, config_, [this] { return IntakeCapacity(); },
                               [this] { return IntakeCapacityAhead(); },
                               [this](uint32_t t) { return TemplateCapacity(t); }),
      std::move(reading));
  ledger_->SetReadAlong([this] { return stream_reader_->CarryRead(); },
                        [this](const StreamReader::CarriedRead& read, redisReply* reply) {
                          if (reply != nullptr) metrics_.ReadCarried();
                          stream_reader_->TakeCarried(read, reply);
                        });

  pools_ = std::make_unique<Pools>(base_, config_, &metrics_);
  SlotHooks hooks;
  hooks.on_ready = [this](Slot& s) { OnSlotReady(s); };
  hooks.on_started = [this](Slot& s) {
    const SlotJob* job = s.job();
    if (job->enqueued_ms > 0) {
      metrics_.ObserveScheduleToStart(pools_->MetricsIndex(s.template_index()),
                                      static_cast<double>(WallMs() - job->enqueued_ms) / 1000.0);
    }
    ledger_->Publish(job->spec.id, EncodeStartedEvent(s.NextSeq(), config_.consumer, job->attempt));
  };
  hooks.on_output = [this](Slot& s, std::string_view stream, std::string_view data) {
    ledger_->Publish(s.job()->spec.id, EncodeOutputEvent(s.NextSeq(), stream, data));
  };
  hooks.on_finished = [this](Slot& s, const SlotJob& job, JobResult&& r) { OnJobFinished(s, job, std::move(r)); };
  Status s = pools_->Start(std::move(spawner_.channel), hooks, [this](const Status& why) {
    // Without the spawner no sandbox can ever be made again: stop, so a supervisor restarts us.
    LogError("spawner lost; shutting down", {{"error", why.message()}});
    exit_code_ = 1;
    Drain("spawner lost");
  });
  if (!s.ok()) return s;
  sessions_ = std::make_unique<Sessions>(base_, config_, keys_, cmd_.get(), ledger_.get(), pools_.get(), &metrics_,
                                         [this] { MaybeExit(); });
  if (network_) sessions_->SetNetwork(network_);
  s = sessions_->Start();
  if (!s.ok()) return s.Prefixed("sessions");

  // Forwarded entries are announced here, so that a daemon with a free slot takes them at once.
  sub_->Subscribe(keys_.prefix() + ":fwd", [this](redisReply* r) {
    // ["message", channel, template name]
    bool named = r != nullptr && r->type == REDIS_REPLY_ARRAY && r->elements == 3;
    stream_reader_->Wake(named ? ReplyString(r->element[2]) : std::string());
  });
  sub_->Subscribe(keys_.Cancel(), [this](redisReply* r) {
    OnCancel(std::string(r->element[2]->str, r->element[2]->len));
  });
  cmd_->PreloadScripts(AllScripts());
  cmd_->Connect();
  reader_->Connect();
  sub_->Connect();

  heartbeat_ev_ = event_new(base_, -1, EV_PERSIST, &Daemon::OnHeartbeatTimer, this);
  struct timeval tv = TimevalMs(config_.heartbeat_ms);
  event_add(heartbeat_ev_, &tv);
  if (notify_ != nullptr) SP_RETURN_IF_ERROR(notify_->StartWatchdog(base_).Prefixed("systemd watchdog"));
  NotifySystemd();
  LogInfo("sandpoold started", {{"consumer", config_.consumer}, {"queue", keys_.Queue(config_.queue)},
                                {"workers", config_.workers}, {"redis", config_.redis.Redacted()},
                                {"cgroup", layout_.mode == CgroupMode::kV1 ? "v1" : "v2"}});
  return Status::Ok();
}

// ---- Jobs ------------------------------------------------------------------------------------

size_t Daemon::Waiting() const {
  size_t n = 0;
  for (const auto& w : waiting_) n += w.size();
  return n;
}

// `slots` not spoken for by the `waiting` entries already here; none while draining.
size_t Daemon::Room(size_t slots, size_t waiting) const {
  if (draining_) return 0;
  return slots > waiting ? slots - waiting : 0;
}

// Ready slots not spoken for by entries already waiting here.
size_t Daemon::IntakeCapacity() const { return Room(pools_->ReadyCount(), Waiting()); }

size_t Daemon::IntakeCapacityAhead() const {
  return Room(pools_->ReadyCount() + pools_->RefillingCount(), Waiting());
}

size_t Daemon::TemplateCapacity(uint32_t t) const {
  size_t owed = 0;
  for (const StreamEntry& e : waiting_[t]) owed += !e.behind_forwarded;
  return Room(pools_->ReadyCount(t), owed);
}

void Daemon::OnEntries(std::vector<StreamEntry> entries) {
  for (StreamEntry& e : entries) {
    if (draining_) return;  // left pending, unclaimed: another daemon (or our restart) runs them
    int t = ForwardTemplate(e.stream);
    const ForwardMark* mark = t >= 0 ? &forwarded_[static_cast<size_t>(t)] : nullptr;
    // Not older than the newest entry this daemon forwarded there: every one it forwarded has
    // been read (forwarded_). This one goes first, then the waiters that were behind them.
    bool past = mark != nullptr && mark->set && mark->replies_owed == 0 && !mark->last.empty() &&
                !EntryIdBefore(e.id, mark->last);
    Dispatch(std::move(e));
    if (past) ClearForwardMark(static_cast<uint32_t>(t));
  }
}

int Daemon::ForwardTemplate(const std::string& stream) const {
  if (stream == keys_.Queue(config_.queue)) return -1;
  for (uint32_t t = 0; t < config_.templates.size(); ++t) {
    if (stream == keys_.Forward(config_.queue, config_.templates[t].name)) return static_cast<int>(t);
  }
  return -1;
}

void Daemon::ClearForwardMark(uint32_t t) {
  ForwardMark& m = forwarded_[t];
  if (!m.set) return;
  m.set = false;
  m.last.clear();
  for (StreamEntry& e : waiting_[t]) e.behind_forwarded = false;
  ServeWaiting(t);  // some were behind the forward queue's entries
}

void Daemon::OnSlotReady(Slot& s) {
  pools_->UpdateGauges();
  // Jobs that were waiting for this template's pool come first (after its forward queue's).
  ServeWaiting(s.template_index());
  stream_reader_->Read();
  if (!notified_ready_) NotifySystemd();  // STATUS= lines go with the heartbeat, not every job
}

void Daemon::ServeWaiting(uint32_t t) {
  auto& waiting = waiting_[t];
  while (!waiting.empty() && !waiting.front().behind_forwarded && !draining_ && pools_->ReadyCount(t) > 0) {
    StreamEntry e = std::move(waiting.front());
    waiting.pop_front();
    Dispatch(std::move(e));
  }
}

void Daemon::Dispatch(StreamEntry e) {
  if (e.deleted) {
    ledger_->Ack(e.stream, e.id);
    return;
  }
  ledger_->Hold(e.stream, e.id, NotifyTargetOf(e.fields));
  auto admitted = Admit(e, config_);
  if (auto* why = std::get_if<Rejection>(&admitted)) {
    Reject(e, *why);
    return;
  }
  Admitted job = std::move(std::get<Admitted>(admitted));
  if (job.template_index == kUnconfiguredTemplate) {
    metrics_.JobReceived();
    sessions_->RunJob(std::move(job.spec), e.stream, e.id);
    return;
  }
  uint32_t t = job.template_index;
  bool intake = e.stream == keys_.Queue(config_.queue);
  // Entries of its template this daemon forwarded wait in the forward queue: a new arrival goes
  // behind them; a waiter handed a sandbox (ServeWaiting) is not behind any more.
  bool behind = e.waiting_since_us == 0 ? intake && forwarded_[t].set : e.behind_forwarded;
  Slot* slot = behind ? nullptr : pools_->ReadySlot(t);
  if (slot == nullptr) {
    bool first_wait = e.waiting_since_us == 0;
    if (first_wait && !behind && e.read_ahead && pools_->RefillingCount(t) > waiting_[t].size()) {
      // Read with a result, for a sandbox of its template on its way: it waits for that one, as
      // planned (not a miss: the pool does not grow for it).
      e.waiting_since_us = MonotonicUs();
      pools_->NoteAhead(t);
      waiting_[t].push_back(std::move(e));
      return;
    }
    e.read_ahead = false;  // an arrival like any other from here on
    if (first_wait) {
      e.waiting_since_us = MonotonicUs();
      pools_->NoteMiss(t);  // grows the pool if it may
    }
    // No slot of its template here, and none coming: another daemon may have one. An entry
    // from the intake goes to the template's forward queue (a forward queue's entries stay:
    // whoever reads one had a free slot for it a moment ago), behind any this daemon put there;
    // not while entries wait here behind those (it would go ahead of them). A ready sandbox held
    // for the forward queue's entries (`behind`) counts as coming: the entry waits for the next.
    bool coming = pools_->ReadyCount(t) > 0 || pools_->PoolSize(t) > pools_->ReadyCount(t) + pools_->BusyCount(t);
    bool waiters_behind = std::any_of(waiting_[t].begin(), waiting_[t].end(),
                                      [](const StreamEntry& w) { return w.behind_forwarded; });
    if (first_wait && !coming && intake && !waiters_behind) {
      ForwardMark& mark = forwarded_[t];
      mark.set = true;
      ++mark.replies_owed;
      LogDebug("forwarding job", {{"job", job.spec.id}, {"template", config_.templates[t].name}});
      // The FORWARD call goes first on the command connection, so any read of the forward queue
      // sent after this wake finds the entry; a read sent before that finds it empty does not
      // clear forwarded_ (StreamReader::Hooks::on_empty) and is followed by another. Its reply
      // comes before any such read's. One that never came (Redis failed it) leaves `last` as it
      // was: the waiters may then go ahead of that one entry, no further.
      ledger_->Forward(job.spec.id, e.stream, e.id, keys_.Forward(config_.queue, config_.templates[t].name),
                       [this, t](const std::string& moved) {
                         ForwardMark& m = forwarded_[t];
                         if (m.replies_owed > 0) --m.replies_owed;
                         if (m.set && !moved.empty() && (m.last.empty() || EntryIdBefore(m.last, moved))) m.last = moved;
                       });
      cmd_->Command({"PUBLISH", keys_.prefix() + ":fwd", config_.templates[t].name}, [](redisReply*) {});
      stream_reader_->NoteWake(config_.templates[t].name);
      return;
    }
    // It waits for the next sandbox of its template (never a path with less isolation), behind
    // the forward queue's entries if this daemon put some there.
    e.behind_forwarded = behind;
    waiting_[t].push_back(std::move(e));  // held, so its lease is renewed
    return;
  }
  if (e.waiting_since_us == 0) {
    pools_->NoteHit(t);
  } else {
    pools_->NoteWaited(t, static_cast<double>(MonotonicUs() - e.waiting_since_us) / 1e6);
  }
  metrics_.JobReceived();
  Claim(slot, std::move(job), std::move(e));
}

void Daemon::Claim(Slot* slot, Admitted job, StreamEntry e) {
  slot->Reserve();
  pools_->UpdateGauges();
  std::string job_id = job.spec.id;
  auto shared = std::make_shared<Admitted>(std::move(job));
  std::string stream = e.stream, entry = e.id;
  claiming_.insert(job_id);
  bool sent = ledger_->Claim(
      job_id, stream, entry, shared->spec.retries + 1,
      [this, slot, shared, stream, entry, job_id](JobLedger::Verdict verdict, uint32_t attempt) {
        claiming_.erase(job_id);
        bool cancel_heard = cancels_heard_.erase(job_id) > 0;
        // Dropped meanwhile (a lease lost, a drain): someone else runs it now.
        if (verdict == JobLedger::Verdict::kRun && !ledger_->Holds(stream, entry)) verdict = JobLedger::Verdict::kDrop;
        switch (verdict) {
          case JobLedger::Verdict::kRun: {
            SlotJob run;
            const SandboxConfig& tc = config_.templates[slot->template_index()].sandbox;
            run.spec = std::move(shared->spec);
            run.stream = stream;
            run.entry = entry;
            run.attempt = attempt;
            int64_t wait_ms = WallMs() - shared->enqueued_ms;
            run.queue_wait_us = wait_ms > 0 ? static_cast<uint64_t>(wait_ms) * 1000 : 0;
            run.enqueued_ms = shared->enqueued_ms;
            run.cpu_time_ms = run.spec.cpu_time_ms ? run.spec.cpu_time_ms : tc.cpu_time_ms;
            run.memory_bytes = run.spec.memory_bytes ? run.spec.memory_bytes : tc.cgroup.memory_bytes;
            run.pids = run.spec.pids ? run.spec.pids : tc.cgroup.pids;
            if (shared->egress) run.network = ShowEgress(*shared->egress);
            auto start = [this, slot, job_id, attempt](SlotJob ready, bool cancelled) {
              metrics_.ObserveQueueWait(static_cast<double>(ready.queue_wait_us) / 1e6);
              if (attempt > 1) metrics_.RecoveredJob(pools_->MetricsIndex(slot->template_index()), "retried");
              running_[job_id] = slot;
              slot->Start(std::move(ready));
              // A cancel that came while the claim (or the narrowing) was on its way.
              if (cancelled) slot->Kill(KillReason::kCancel);
            };
            if (!shared->narrowed) return start(std::move(run), cancel_heard);
            // Its slot gets its narrower policy before anything of it runs; if that cannot be
            // done, it does not run (never with the template's wider one). Meanwhile it counts
            // as claiming (a cancel is remembered).
            claiming_.insert(job_id);
            auto narrowed_run = std::make_shared<SlotJob>(std::move(run));
            auto narrowed = [this, slot, job_id, stream, entry, attempt, cancel_heard, narrowed_run, start](Status s) {
              claiming_.erase(job_id);
              bool cancelled = cancels_heard_.erase(job_id) > 0 || cancel_heard;
              if (!s.ok()) {
                LogError("cannot narrow a slot's network; the job fails", {{"job", job_id}, {"error", s.message()}});
                if (network_) network_->Reset(slot->template_index(), slot->index());
                slot->Release();
                ledger_->Finish(ErrorResult(job_id, attempt,
                                            JobError{ErrorCode::kInternal,
                                                     "the job's egress policy could not be applied: " + s.message()}),
                                stream, entry, 0, config_.templates[slot->template_index()].name);
                return;
              }
              narrowed_run->narrowed = true;
              start(std::move(*narrowed_run), cancelled);
            };
            if (network_) network_->Narrow(slot->template_index(), slot->index(), *shared->egress, std::move(narrowed));
            else narrowed(Status::Error("no network"));
            return;
          }
          default:
            slot->Release();
            if (verdict == JobLedger::Verdict::kLost) {
              metrics_.RecoveredJob(pools_->MetricsIndex(slot->template_index()), "lost");
            }
            SettleClaim(ledger_.get(), verdict, stream, entry, "the daemon running this job died and no retry was left",
                        [&](JobError error) {
                          ledger_->Finish(ErrorResult(job_id, attempt, std::move(error)), stream, entry, 0,
                                          config_.templates[slot->template_index()].name);
                        });
            return;
        }
      });
  if (!sent) {
    claiming_.erase(job_id);
    ledger_->Drop(stream, entry);
    slot->Release();
  }
}

void Daemon::Reject(const StreamEntry& e, const Rejection& why) {
  metrics_.JobReceived();
  ledger_->Reject(why.job_id, e.stream, e.id, why.code, why.message, e.fields, why.dead_letter);
}

void Daemon::OnJobFinished(Slot& s, const SlotJob& job, JobResult&& r) {
  running_.erase(r.id);
  if (job.narrowed && network_) network_->Reset(s.template_index(), s.index());
  r.network = job.network;
  if (takeovers_.erase(r.id) > 0) {
    // Another daemon took this job over while it ran here: its result is that daemon's to give.
    LogWarn("job killed: another daemon took it over", {{"job", r.id}});
    ledger_->Drop(job.stream, job.entry);
  } else {
    pools_->NoteRun(s.template_index(), static_cast<double>(r.exec_time_us) / 1e6);
    ledger_->Finish(std::move(r), job.stream, job.entry, s.NextSeq(), config_.templates[s.template_index()].name);
  }
  pools_->UpdateGauges();
  MaybeExit();
}

void Daemon::OnCancel(const std::string& job_id) {
  if (sessions_->Cancel(job_id)) return;
  auto it = running_.find(job_id);
  if (it == running_.end()) {
    // Queued, here or elsewhere: its cancelled result is stored at once if nobody runs it. If
    // its claim is on the way here, the claim may win that race: then it is killed as it starts.
    if (!ValidJobId(job_id)) return;
    if (claiming_.count(job_id)) cancels_heard_.insert(job_id);
    ledger_->CancelQueued(job_id);
    return;
  }
  LogInfo("cancelling job", {{"job", job_id}});
  it->second->Kill(KillReason::kCancel);
}

// Another daemon took over an entry we hold (we were presumed dead: a lease ran out while we
// could not renew it). Whatever runs it here stops now; a waiting entry is forgotten.
void Daemon::OnLeaseLost(const std::string& stream, const std::string& entry) {
  ledger_->Drop(stream, entry);
  for (auto& w : waiting_) {
    w.erase(std::remove_if(w.begin(), w.end(), [&](const StreamEntry& e) { return e.stream == stream && e.id == entry; }),
            w.end());
  }
  for (auto& [job_id, slot] : running_) {
    if (slot->job() != nullptr && slot->job()->stream == stream && slot->job()->entry == entry) {
      LogWarn("lost the lease of a running job; killing it", {{"job", job_id}, {"entry", entry}});
      takeovers_[job_id] = KillReason::kTakenOver;
      slot->Kill(KillReason::kTakenOver);
      return;
    }
  }
}

// ---- Heartbeat, health ------------------------------------------------------------------------

bool Daemon::RedisResponsive(std::string* why) const {
  if (!cmd_->connected() || !reader_->connected()) {
    *why = "redis not connected";
    return false;
  }
  if (cmd_->OldestPendingMs() > kRedisStallMs) {
    *why = "redis not answering (a command has waited " + std::to_string(cmd_->OldestPendingMs()) + " ms)";
    return false;
  }
  return true;
}

void Daemon::OnHeartbeatTimer(evutil_socket_t, short, void* arg) { static_cast<Daemon*>(arg)->Heartbeat(); }

void Daemon::Heartbeat() {
  pools_->UpdateGauges();
  // Logs a Redis that stops answering once when it starts and once when it ends (/readyz shows
  // it meanwhile).
  cmd_->WatchStall(kRedisStallMs);
  NotifySystemd();
  if (network_ && network_->firewall) network_->firewall->ExportCounters(&metrics_);
  if (!cmd_->connected()) return;
  // Anything that failed on an error reply (not a lost connection) is retried from here.
  ledger_->FlushPending();
  ledger_->RefreshLeases([this](const std::string& stream, const std::string& entry) { OnLeaseLost(stream, entry); });
  // Cancels never depend on pub/sub alone: the flags of what runs here are read every beat.
  std::vector<std::string> ids;
  for (const auto& [id, slot] : running_) ids.push_back(id);
  for (std::string& id : sessions_->RunningOps()) ids.push_back(std::move(id));
  ledger_->CheckCancels(ids, [this](const std::string& id) { OnCancel(id); });
  WriteHeartbeatRecord();
  RefreshQueueFigures(cmd_.get(), stream_reader_->Streams(), &metrics_,
                      [this](const QueueFigures& f) { queue_figures_ = f; });
  // Entries read ahead for a sandbox on its way are demand the pool already meets.
  std::vector<size_t> waiting;
  for (const auto& w : waiting_) {
    waiting.push_back(static_cast<size_t>(
        std::count_if(w.begin(), w.end(), [](const StreamEntry& e) { return !e.read_ahead; })));
  }
  pools_->Resize(waiting);
  stream_reader_->RescanOwn([this](const std::string& stream) { return ledger_->TakeRescan(stream); });
  stream_reader_->Heartbeat();
  sessions_->Heartbeat();
}

// systemd (sd_notify.h): READY=1 once, when Redis has stored this daemon's record (it answers, and
// peers and clients see the daemon), it still answers, the reader is connected, and every
// template that has a pool has a sandbox ready (or already busy); STATUS= when it changed; while
// draining, the stop timeout is extended past what is left of the grace period (plus the kills,
// the last result writes and Stop's wait for the pool's processes), one heartbeat at a time.
void Daemon::NotifySystemd() {
  if (notify_ == nullptr || !notify_->enabled() || !pools_ || !cmd_ || !reader_) return;
  std::string state;
  bool warm = true;
  for (uint32_t t = 0; t < pools_->templates(); ++t) {
    if (pools_->PoolSize(t) > 0 && pools_->ReadyCount(t) + pools_->BusyCount(t) == 0) warm = false;
  }
  std::string why;
  bool redis = RedisResponsive(&why);
  if (!notified_ready_ && !draining_ && record_stored_ && redis && warm) {
    notified_ready_ = true;
    state += "READY=1\n";
    LogInfo("ready: told systemd");
  }
  std::string status;
  if (draining_) {
    status = "draining: " + std::to_string(running_.size()) + " jobs running";
  } else {
    status = std::to_string(pools_->ReadyCount()) + " of " + std::to_string(pools_->SlotCount()) + " slots ready, " +
             std::to_string(pools_->BusyCount()) + " busy; queue lag " + std::to_string(static_cast<uint64_t>(queue_figures_.lag)) +
             ", pending " + std::to_string(static_cast<uint64_t>(queue_figures_.pending)) + "; " + (redis ? "redis ok" : why);
    if (!notified_ready_) status = "warming up: " + status;
  }
  if (status != notified_status_) {
    notified_status_ = status;
    state += "STATUS=" + status + "\n";
  }
  if (draining_) {
    int64_t left_us = std::max<int64_t>(0, drain_deadline_us_ - MonotonicUs());
    state += "EXTEND_TIMEOUT_USEC=" + std::to_string(left_us + 15 * 1000000) + "\n";
  }
  if (!state.empty()) notify_->Send(state);
}

// The daemon's record (PROTOCOL.md section 1): who is alive and what it can take.
void Daemon::WriteHeartbeatRecord() {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(13);
  pk.pack("v"), pk.pack(1);
  pk.pack("consumer"), pk.pack(config_.consumer);
  pk.pack("pid"), pk.pack(static_cast<int64_t>(::getpid()));
  pk.pack("queue"), pk.pack(config_.queue);
  pk.pack("slots"), pk.pack(static_cast<uint64_t>(pools_->SlotCount()));
  pk.pack("ready"), pk.pack(static_cast<uint64_t>(pools_->ReadyCount()));
  pk.pack("busy"), pk.pack(static_cast<uint64_t>(pools_->BusyCount()));
  pk.pack("draining"), pk.pack(draining_);
  pk.pack("started_ms"), pk.pack(started_ms_);
  // What `sandpool top` shows (PROTOCOL.md section 10): pools, the queue, the last minute.
  pk.pack("pools"), PackPools(pk, config_, *pools_);
  pk.pack("queue_figures"), pk.pack_map(3);
  pk.pack("pending"), pk.pack(static_cast<uint64_t>(queue_figures_.pending));
  pk.pack("lag"), pk.pack(static_cast<uint64_t>(queue_figures_.lag));
  pk.pack("oldest_ms"), pk.pack(queue_figures_.oldest_ms);
  pk.pack("recent"), PackRecent(pk, metrics_.recent().Last(MonotonicUs()));
  // Network templates' policies (PROTOCOL.md section 10): what jobs and sessions may narrow.
  size_t networked = 0;
  for (const TemplateConfig& t : config_.templates) networked += t.network;
  pk.pack("templates"), pk.pack_map(static_cast<uint32_t>(networked));
  for (const TemplateConfig& t : config_.templates) {
    if (!t.network) continue;
    pk.pack(t.name);
    pk.pack_map(2);
    pk.pack("network"), PackNetworkInfo(pk, ShowEgress(t.egress));
    pk.pack("expose"), pk.pack(t.expose);
  }
  cmd_->Command({"SET", keys_.Daemon(config_.consumer), std::string(buf.data(), buf.size()), "PX",
                 std::to_string(3 * config_.heartbeat_ms)},
                [this](redisReply* r) {
                  if (r != nullptr && r->type == REDIS_REPLY_STATUS) metrics_.HeartbeatWritten(static_cast<double>(WallMs()) / 1000.0);
                  // Redis answered, and peers and clients can see this daemon: one half of ready.
                  if (r != nullptr && r->type == REDIS_REPLY_STATUS && !record_stored_) {
                    record_stored_ = true;
                    NotifySystemd();
                  }
                });
}

// ---- Signals, drain, exit ---------------------------------------------------------------------

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
  LogInfo("draining", {{"why", why}, {"running", static_cast<uint64_t>(running_.size())}, {"grace_ms", config_.grace_ms}});
  grace_ev_ = evtimer_new(base_, &Daemon::OnGraceTimer, this);
  struct timeval tv = TimevalMs(config_.grace_ms);
  evtimer_add(grace_ev_, &tv);
  drain_deadline_us_ = MonotonicUs() + static_cast<int64_t>(config_.grace_ms) * 1000;
  if (notify_ != nullptr) notify_->Send("STOPPING=1");
  NotifySystemd();
  if (pools_) pools_->SetDraining();
  // Entries waiting for a slot are not ours to run any more: another daemon (or our restart)
  // gets them through the pending list, unclaimed, so they run normally. Stopping the reader
  // drops a reply that may be on its way for the same reason.
  for (auto& w : waiting_) {
    for (const StreamEntry& e : w) ledger_->Drop(e.stream, e.id);
    w.clear();
  }
  if (stream_reader_) stream_reader_->Stop();
  if (sessions_) sessions_->Drain();
  MaybeExit();
}

void Daemon::OnGraceTimer(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<Daemon*>(arg);
  if (self->sessions_) self->sessions_->StopAll();
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
  if (!running_.empty() || (pools_ && pools_->AnyBusy())) return;
  if (sessions_ && !sessions_->Idle()) return;
  ledger_->Flush();  // the last results go out now, or wait for Redis in pending_results()
  if (ledger_->pending_results() > 0 && cmd_->connected()) return;  // still being written
  if (ledger_->pending_results() > 0) {
    LogWarn("leaving with results not stored (Redis unreachable); their entries stay pending",
            {{"count", static_cast<uint64_t>(ledger_->pending_results())}});
  }
  // Let queued replies (the last results) flush before leaving.
  struct timeval tv = {0, 100000};
  event_base_loopexit(base_, &tv);
}

void Daemon::Stop() {
  if (sessions_) sessions_->Close();
  if (pools_) pools_->ShutdownAll();
  if (cmd_) cmd_->Close();
  if (reader_) reader_->Close();
  if (sub_) sub_->Close();
  if (spawner_.pid > 0) ::kill(spawner_.pid, SIGKILL);
  if (network_ && network_->preview) network_->preview->Stop();
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
  Status removed = RemoveSlotCgroups(layout_);
  if (!removed.ok()) LogWarn("cgroups left behind", {{"error", removed.message()}});
  LogInfo("sandpoold stopped");
}

}  // namespace sandpool
