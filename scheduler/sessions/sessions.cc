#include "scheduler/sessions/sessions.h"

#include "scheduler/net/net_setup.h"
#include "scheduler/net/port_exposure.h"
#include "worker/netns_setup.h"

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
namespace {

constexpr int kBlockMs = 1000;
constexpr size_t kReadBatch = 16;
constexpr size_t kScanBatch = 100;

// The meta file: what a session was created with (sessions.h). msgpack, written atomically.
struct MetaFile {
  std::string id, template_name;
  std::vector<std::pair<std::string, std::string>> env, labels;
  uint64_t memory_bytes = 0, pids = 0, disk_bytes = 0;
  double cpus = 0;
  uint64_t idle_timeout_ms = 0, max_lifetime_ms = 0;
  bool ephemeral = false;
  int64_t created_ms = 0;
  std::string base;
  // The session's own egress request (version 3 creates), kept for its resumes.
  bool egress = false, egress_allow_set = false;
  std::vector<std::string> egress_allow, egress_deny;
  MSGPACK_DEFINE_MAP(id, template_name, env, labels, memory_bytes, pids, disk_bytes, cpus, idle_timeout_ms,
                     max_lifetime_ms, ephemeral, created_ms, base, egress, egress_allow_set, egress_allow, egress_deny)
};

std::map<std::string, std::string> Fields(redisReply* kv) {
  std::map<std::string, std::string> out;
  if (kv == nullptr || kv->type != REDIS_REPLY_ARRAY) return out;
  for (size_t i = 0; i + 1 < kv->elements; i += 2) out[ReplyString(kv->element[i])] = ReplyString(kv->element[i + 1]);
  return out;
}

// The time a stream entry id was made ("<ms>-<n>").
int64_t EntryMs(const std::string& entry) { return std::strtoll(entry.c_str(), nullptr, 10); }

bool IsCommand(SessionOp op) { return op == SessionOp::kExec || op == SessionOp::kCode; }

std::string PackMap(const std::vector<std::pair<std::string, std::string>>& kv) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(static_cast<uint32_t>(kv.size()));
  for (const auto& [k, v] : kv) {
    pk.pack(k);
    pk.pack(v);
  }
  return std::string(buf.data(), buf.size());
}

}  // namespace

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
                   JobLedger* ledger, Pools* pools, Metrics* metrics, std::function<void()> on_idle)
    : base_(base), config_(config), keys_(keys), cmd_(cmd), ledger_(ledger), pools_(pools), metrics_(metrics),
      on_idle_(std::move(on_idle)) {
  own_stream_ = keys_.SessionStream(config_.queue, config_.consumer);
  intake_ = keys_.SessionIntake(config_.queue);
  limits_.default_disk_bytes = config_.session_disk_bytes;
  limits_.max_disk_bytes = std::max(config_.max_session_disk_bytes, config_.session_disk_bytes);
  limits_.min_disk_bytes = std::min<uint64_t>(64ull << 20, limits_.max_disk_bytes);
  snapshots_ = std::make_unique<Snapshots>(config_, keys_, cmd_);
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
  if (reader_) reader_->Close();
  while (!spares_.empty()) DropSpare(spares_.begin()->first, "");
  for (auto& [sid, e] : sessions_) {
    if (e.session) Collect(std::move(e.session));
  }
  spare_keepers_.clear();
}

// ---- Start, files ------------------------------------------------------------------------------

std::string Sessions::Dir(const std::string& sid) const {
  // "s-" keeps ids such as ".." from naming anything but a directory of their own.
  return config_.state_dir + "/sessions/s-" + sid;
}

Status Sessions::Start() {
  for (const std::string& d : {config_.state_dir, config_.state_dir + "/sessions"}) {
    if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus("mkdir " + d);
  }
  if (Status s = snapshots_->Start(); !s.ok()) return s;
  LoadFromDisk();
  reader_ = std::make_unique<RedisAsync>(
      base_, config_.redis, "sessions",
      RedisAsync::Hooks{[this] {
                          own_scan_ = true;
                          groups_ready_ = false;
                          reading_ = false;
                          ConnectReader();
                        },
                        [this] { reading_ = false; }},
      keys_.ClientName(config_.consumer, "sessions"));
  reader_->Connect();
  return Status::Ok();
}

void Sessions::LoadFromDisk() {
  std::string root = config_.state_dir + "/sessions";
  DIR* d = ::opendir(root.c_str());
  if (d == nullptr) return;
  while (struct dirent* de = ::readdir(d)) {
    std::string name = de->d_name;
    if (name.rfind("w-", 0) == 0) {
      // A warm spare of an earlier run: never a session's, nothing to keep.
      std::string dir = root + "/" + name;
      ::unlink((dir + "/disk.img").c_str());
      ::rmdir(dir.c_str());
      continue;
    }
    if (name.rfind("s-", 0) != 0) continue;
    std::string sid = name.substr(2);
    std::string dir = root + "/" + name;
    std::ifstream in(dir + "/meta", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    MetaFile m;
    bool ok = false;
    try {
      msgpack::object_handle oh = msgpack::unpack(bytes.data(), bytes.size());
      oh.get().convert(m);
      ok = m.id == sid && ValidJobId(sid);
    } catch (...) {
    }
    struct stat st;
    int t = ok ? FindTemplate(config_, m.base.empty() ? m.template_name : m.base) : -1;
    if (!ok || ::stat((dir + "/disk.img").c_str(), &st) != 0 || t < 0) {
      LogWarn("session files incomplete; removed", {{"session", sid}, {"dir", dir}});
      RemoveFiles(sid);
      continue;
    }
    Entry& e = sessions_[sid];
    e.meta = Meta{m.id, m.template_name, m.env, m.labels, m.memory_bytes, m.pids, m.disk_bytes, m.cpus,
                  m.idle_timeout_ms, m.max_lifetime_ms, m.ephemeral, m.created_ms, m.base.empty() ? m.template_name : m.base,
                  std::nullopt};
    if (m.egress) {
      e.meta.egress = EgressRequest{};
      if (m.egress_allow_set) e.meta.egress->allow = m.egress_allow;
      e.meta.egress->deny = m.egress_deny;
    }
    e.template_index = static_cast<uint32_t>(t);
    e.state = State::kStopped;
    e.last_used_ms = m.created_ms;
  }
  ::closedir(d);
  if (!sessions_.empty()) LogInfo("sessions found on disk (stopped)", {{"count", static_cast<uint64_t>(sessions_.size())}});
}

Status Sessions::SaveMeta(const Meta& m) const {
  MetaFile f{m.id, m.template_name, m.env, m.labels, m.memory_bytes, m.pids, m.disk_bytes, m.cpus,
             m.idle_timeout_ms, m.max_lifetime_ms, m.ephemeral, m.created_ms, m.base};
  if (m.egress) {
    f.egress = true;
    f.egress_allow_set = m.egress->allow.has_value();
    f.egress_allow = m.egress->allow.value_or(std::vector<std::string>{});
    f.egress_deny = m.egress->deny;
  }
  msgpack::sbuffer buf;
  msgpack::pack(buf, f);
  std::string dir = Dir(m.id);
  std::string tmp = dir + "/meta.tmp";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return ErrnoStatus("open " + tmp);
  if (::write(fd.get(), buf.data(), buf.size()) != static_cast<ssize_t>(buf.size()) || ::fsync(fd.get()) != 0) {
    return ErrnoStatus("write " + tmp);
  }
  fd.reset();
  if (::rename(tmp.c_str(), (dir + "/meta").c_str()) != 0) return ErrnoStatus("rename " + tmp);
  return Status::Ok();
}

// Only this daemon's own directory, by names it made: nothing a session controls is followed
// (the disk image is a file the host never looks inside).
void Sessions::RemoveFiles(const std::string& sid) {
  std::string dir = Dir(sid);
  for (const char* f : {"/disk.img", "/meta", "/meta.tmp"}) ::unlink((dir + f).c_str());
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
    LogWarn("session directory not removed", {{"dir", dir}, {"error", std::strerror(errno)}});
  }
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
    auto policy = EffectiveEgress(tc.egress, tc.name, e.meta.egress);
    if (policy.ok()) i.network = ShowEgress(*policy);
  }
  return i;
}

void Sessions::WriteRecord(Entry& e) {
  if (e.internal) {
    e.record_dirty = false;
    return;
  }
  const Meta& m = e.meta;
  std::string key = keys_.Session(m.id);
  msgpack::sbuffer opts;
  msgpack::packer<msgpack::sbuffer> pk(opts);
  pk.pack_map(6);
  pk.pack("env"), pk.pack(m.env.size());
  pk.pack("memory_bytes"), pk.pack(m.memory_bytes);
  pk.pack("pids"), pk.pack(m.pids);
  pk.pack("cpus"), pk.pack(m.cpus);
  pk.pack("disk_bytes"), pk.pack(m.disk_bytes);
  pk.pack("idle_timeout_ms"), pk.pack(m.idle_timeout_ms);
  bool sent = cmd_->Command(
      {"HSET", key, "state", StateName(e.state), "template", m.template_name, "consumer", config_.consumer, "created_ms",
       std::to_string(m.created_ms), "last_used_ms", std::to_string(e.last_used_ms), "idle_timeout_ms",
       std::to_string(m.idle_timeout_ms), "max_lifetime_ms", std::to_string(m.max_lifetime_ms), "timeout_at_ms",
       std::to_string(TimeoutAt(e)), "ephemeral", m.ephemeral ? "1" : "0", "labels", PackMap(m.labels), "options",
       std::string(opts.data(), opts.size()), "error", e.error},
      [](redisReply*) {});
  if (!sent) {
    e.record_dirty = true;
    return;
  }
  cmd_->Command({"PERSIST", key}, [](redisReply*) {});
  cmd_->Command({"SADD", keys_.Sessions(), m.id}, [](redisReply*) {});
  cmd_->Command({"SADD", keys_.HostSessions(config_.consumer), m.id}, [](redisReply*) {});
  cmd_->Command({"SADD", keys_.SessionHosts(), config_.consumer}, [](redisReply*) {});
  e.record_dirty = false;
}

// The session is gone: its record says so for result_ttl, then goes; the id is free.
void Sessions::ForgetRecord(const std::string& sid) {
  std::string key = keys_.Session(sid);
  cmd_->Command({"HSET", key, "state", "destroyed", "consumer", config_.consumer}, [](redisReply*) {});
  cmd_->Command({"EXPIRE", key, std::to_string(config_.result_ttl_s)}, [](redisReply*) {});
  cmd_->Command({"SREM", keys_.Sessions(), sid}, [](redisReply*) {});
  cmd_->Command({"SREM", keys_.HostSessions(config_.consumer), sid}, [](redisReply*) {});
}

void Sessions::SetState(Entry& e, State s, std::string error) {
  e.state = s;
  e.error = std::move(error);
  WriteRecord(e);
}

void Sessions::OnCommandConnected() {
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
  bool sent = cmd_->Command({"SMEMBERS", keys_.HostSessions(config_.consumer)}, [this](redisReply* r) {
    if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return;  // tried again on the next connect
    std::vector<std::string> listed;
    for (size_t i = 0; i < r->elements; ++i) listed.push_back(ReplyString(r->element[i]));
    for (const std::string& sid : listed) {
      if (sessions_.count(sid) == 0) {
        // Its files are not here (it never got a disk, or the state directory was wiped).
        cmd_->Command({"HGET", keys_.Session(sid), "state"}, [this, sid](redisReply* s) {
          if (ReplyString(s) != "destroyed") {
            LogWarn("session record without files on this host; marked destroyed", {{"session", sid}});
          }
          ForgetRecord(sid);
        });
      }
    }
    // A session a peer destroyed while this host was away: its files go now.
    auto left = std::make_shared<size_t>(sessions_.size());
    auto finish = [this] {
      reconciled_ = true;
      for (auto& [sid, e] : sessions_) WriteRecord(e);
      Read();
    };
    if (*left == 0) {
      finish();
      return;
    }
    for (auto& [sid_ref, e_ref] : sessions_) {
      std::string sid = sid_ref;
      cmd_->Command({"HGET", keys_.Session(sid), "state"}, [this, sid, left, finish](redisReply* s) {
        if (ReplyString(s) == "destroyed") {
          LogInfo("session destroyed while this host was away; its files are removed", {{"session", sid}});
          RemoveFiles(sid);
          ForgetRecord(sid);
          sessions_.erase(sid);
        }
        if (--*left == 0) finish();
      });
    }
  });
  (void)sent;
}

// ---- Reading -----------------------------------------------------------------------------------

void Sessions::ConnectReader() {
  auto left = std::make_shared<int>(2);
  for (const std::string& s : {own_stream_, intake_}) {
    reader_->Command({"XGROUP", "CREATE", s, std::string(Keys::kGroup), "0", "MKSTREAM"}, [this, left](redisReply* r) {
      std::string text = ReplyString(r);
      if (r == nullptr || (r->type == REDIS_REPLY_ERROR && text.rfind("BUSYGROUP", 0) != 0)) return;
      if (--*left == 0) {
        groups_ready_ = true;
        Read();
      }
    });
  }
}

bool Sessions::HasRoom() const {
  return !draining_ && (pools_->SessionFits(config_.templates[0].sandbox.cgroup.memory_bytes) || !spares_.empty());
}

bool Sessions::TakeBudget(uint64_t memory) {
  while (!pools_->TakeSessionBudget(memory)) {
    if (spares_.empty()) return false;
    DropSpare(spares_.begin()->first, "");  // a spare gives way to a session
  }
  return true;
}

void Sessions::Read() {
  if (reading_ || draining_ || !groups_ready_ || !reconciled_ || !reader_ || !reader_->connected()) return;
  reading_ = true;
  if (own_scan_) {
    // What this consumer was given before (a previous run, or a reply lost with a connection).
    reader_->Command({"XREADGROUP", "GROUP", std::string(Keys::kGroup), config_.consumer, "COUNT",
                      std::to_string(kScanBatch), "STREAMS", own_stream_, intake_, "0", "0"},
                     [this](redisReply* r) {
                       reading_ = false;
                       if (r == nullptr) return;
                       size_t n = 0;
                       if (r->type == REDIS_REPLY_ARRAY) {
                         for (size_t i = 0; i < r->elements; ++i) {
                           redisReply* s = r->element[i];
                           if (s->type == REDIS_REPLY_ARRAY && s->elements == 2) n += s->element[1]->elements;
                         }
                         Deliver(r);
                       }
                       if (n == 0) own_scan_ = false;
                       Read();
                     });
    return;
  }
  std::vector<std::string> args = {"XREADGROUP", "GROUP", std::string(Keys::kGroup), config_.consumer, "COUNT",
                                   std::to_string(kReadBatch), "BLOCK", std::to_string(kBlockMs), "STREAMS", own_stream_};
  bool room = HasRoom();
  if (room) args.push_back(intake_);
  args.push_back(">");
  if (room) args.push_back(">");
  bool sent = reader_->CommandBlocking(args, [this](redisReply* r) {
    reading_ = false;
    if (r == nullptr) return;  // reconnecting: the connect hook reads again
    if (r->type == REDIS_REPLY_ERROR) {
      LogWarn("reading session operations failed", {{"error", ReplyString(r)}});
      if (ReplyString(r).rfind("NOGROUP", 0) == 0) {
        groups_ready_ = false;
        ConnectReader();
      }
      return;
    }
    if (r->type == REDIS_REPLY_ARRAY) Deliver(r);
    Read();
  });
  if (!sent) reading_ = false;
}

void Sessions::Deliver(redisReply* streams) {
  for (size_t i = 0; i < streams->elements; ++i) {
    redisReply* s = streams->element[i];
    if (s->type != REDIS_REPLY_ARRAY || s->elements != 2) continue;
    std::string stream = ReplyString(s->element[0]);
    redisReply* entries = s->element[1];
    for (size_t k = 0; k < entries->elements; ++k) {
      redisReply* en = entries->element[k];
      if (en->type != REDIS_REPLY_ARRAY || en->elements != 2) continue;
      std::string id = ReplyString(en->element[0]);
      auto fields = Fields(en->element[1]);
      if (stream == intake_) OnIntakeEntry(id, fields);
      else OnOwnEntry(id, fields);
    }
  }
}

void Sessions::OnIntakeEntry(const std::string& entry, const std::map<std::string, std::string>& fields) {
  if (fields.empty()) {  // deleted meanwhile
    ledger_->Ack(intake_, entry);
    return;
  }
  auto req_it = fields.find("req");
  auto decoded = DecodeSessionRequest(req_it == fields.end() ? std::string_view() : req_it->second, config_.limits, limits_);
  if (auto* err = std::get_if<JobError>(&decoded)) {
    AnswerEntry(intake_, entry, fields, err->code, err->message);
    return;
  }
  const SessionRequest& req = std::get<SessionRequest>(decoded);
  if (req.op == SessionOp::kSnapshotDelete) {
    // Needs no session: done by whichever daemon reads it (idempotent), answered on this stream.
    std::string id = req.id;
    snapshots_->Delete(req.name, [this, id, entry](Status s) {
      OpResult res;
      res.id = id;
      res.op = "snapshot_delete";
      if (!s.ok()) res.error = JobError{ErrorCode::kInternal, "snapshot_delete: " + s.message()};
      else res.value = "\x80";
      ledger_->Answer(id, intake_, entry, EncodeOpResult(res), EncodeOpExitedEvent(res));
    });
    return;
  }
  std::string op(SessionOpOf(req.op).name);
  bool sent = cmd_->Eval(kSessionRouteScript,
      {"3", intake_, keys_.Session(req.session), keys_.Sessions(), entry,
       std::string(Keys::kGroup), config_.consumer, keys_.SessionIntake(config_.queue) + ":", std::to_string(WallMs()), op,
       req.id, req_it->second, req.session, keys_.HostSessions(""), keys_.SessionHosts()},
      [this, entry, fields, sid = req.session](redisReply* r) {
        std::string verdict = ReplyString(r);
        if (verdict == "none") {
          AnswerEntry(intake_, entry, fields, ErrorCode::kSessionNotFound, "no session " + sid);
        } else if (r != nullptr && r->type == REDIS_REPLY_ERROR) {
          LogWarn("routing a session request failed", {{"entry", entry}, {"error", verdict}});
        }
      });
  (void)sent;  // not sent: it stays pending here, and the own scan after reconnecting finds it
}

void Sessions::OnOwnEntry(const std::string& entry, const std::map<std::string, std::string>& fields) {
  if (fields.empty()) {
    ledger_->Ack(own_stream_, entry);
    return;
  }
  auto req_it = fields.find("req");
  auto decoded = DecodeSessionRequest(req_it == fields.end() ? std::string_view() : req_it->second, config_.limits, limits_);
  if (auto* err = std::get_if<JobError>(&decoded)) {
    AnswerEntry(own_stream_, entry, fields, err->code, err->message);
    return;
  }
  Op op;
  op.stream = own_stream_;
  op.entry = entry;
  op.req = std::move(std::get<SessionRequest>(decoded));
  op.received_us = MonotonicUs();
  auto id_it = fields.find("id");
  if (id_it == fields.end() || id_it->second != op.req.id) {
    AnswerEntry(own_stream_, entry, fields, ErrorCode::kBadField, "id: the entry's id field and the request's differ");
    return;
  }
  ++ops_in_flight_;
  auto shared = std::make_shared<Op>(std::move(op));
  bool sent = ledger_->Claim(shared->req.id, own_stream_, entry, 1, [this, shared](JobLedger::Verdict v, uint32_t attempt) {
    shared->attempt = attempt;
    switch (v) {
      case JobLedger::Verdict::kRun:
        Serve(std::move(*shared));
        return;
      case JobLedger::Verdict::kCancelled:
        AnswerError(*shared, ErrorCode::kCancelled, "cancelled by a client before it started");
        return;
      case JobLedger::Verdict::kLost:
        AnswerError(*shared, ErrorCode::kWorkerLost, "the daemon holding the session died while this operation ran");
        return;
      case JobLedger::Verdict::kDrop:
        ledger_->Ack(own_stream_, shared->entry);
        break;
      case JobLedger::Verdict::kUnknown:
        break;  // left pending: the own scan after reconnecting claims it again
    }
    --ops_in_flight_;
    if (on_idle_) on_idle_();
  });
  if (!sent) --ops_in_flight_;
}

// ---- Operations --------------------------------------------------------------------------------

void Sessions::Serve(Op op) {
  const SessionRequest& r = op.req;
  if (r.op == SessionOp::kSnapshotDelete) {
    DeleteSnapshot(op);
    return;
  }
  auto it = sessions_.find(r.session);
  if (it == sessions_.end()) {
    if (r.op == SessionOp::kCreate) {
      Entry& fresh = sessions_[r.session];  // before `op` is moved from
      Create(fresh, std::move(op));
    } else if (r.op == SessionOp::kDestroy) {
      AnswerOp(op, OpAnswer{std::nullopt, "\x80"});  // idempotent: nothing to remove
    } else {
      AnswerError(op, ErrorCode::kSessionNotFound, "no session " + r.session + " on " + config_.consumer);
    }
    return;
  }
  Entry& e = it->second;
  e.last_used_ms = WallMs();
  e.record_dirty = true;
  switch (r.op) {
    case SessionOp::kCreate:
      if (r.create.template_given && r.create.template_name != e.meta.template_name) {
        AnswerError(op, ErrorCode::kTemplateMismatch,
                    "session " + r.session + " has template " + e.meta.template_name + ", not " + r.create.template_name);
        return;
      }
      switch (e.state) {
        case State::kRunning:
          AnswerOp(op, OpAnswer{std::nullopt, EncodeSessionInfo(InfoOf(e))});
          return;
        case State::kCreating:
        case State::kStopping:
          e.waiting.push_back(std::move(op));
          return;
        case State::kStopped:
        case State::kError:
          e.waiting.push_back(std::move(op));
          Resume(e);
          return;
        case State::kDestroying:
          AnswerError(op, ErrorCode::kSessionBusy, "the session is being destroyed");
          return;
      }
      return;
    case SessionOp::kInfo:
      Info(e, std::move(op));
      return;
    case SessionOp::kStop:
      if (e.meta.ephemeral) {
        Destroy(e, std::move(op));
        return;
      }
      switch (e.state) {
        case State::kRunning: {
          auto shared = std::make_shared<Op>(std::move(op));
          StopSession(e, [this, shared] {
            auto found = sessions_.find(shared->req.session);
            if (found == sessions_.end()) AnswerOp(*shared, OpAnswer{std::nullopt, "\x80"});
            else AnswerOp(*shared, OpAnswer{std::nullopt, EncodeSessionInfo(InfoOf(found->second))});
          });
          return;
        }
        case State::kCreating:
        case State::kStopping:
          e.waiting.push_back(std::move(op));
          return;
        case State::kStopped:
        case State::kError:
          AnswerOp(op, OpAnswer{std::nullopt, EncodeSessionInfo(InfoOf(e))});
          return;
        case State::kDestroying:
          AnswerError(op, ErrorCode::kSessionBusy, "the session is being destroyed");
          return;
      }
      return;
    case SessionOp::kDestroy:
      Destroy(e, std::move(op));
      return;
    case SessionOp::kSnapshot:
      TakeSnapshot(e, std::move(op));
      return;
    default:
      break;
  }
  switch (e.state) {
    case State::kRunning:
      RunOp(e, std::move(op));
      return;
    case State::kCreating:
      e.waiting.push_back(std::move(op));
      return;
    case State::kStopped:
    case State::kError:
      AnswerError(op, ErrorCode::kSessionStopped,
                  "session " + r.session + " is " + StateName(e.state) + ": create it again to resume it");
      return;
    case State::kStopping:
    case State::kDestroying:
      AnswerError(op, ErrorCode::kSessionBusy, std::string("the session is ") + StateName(e.state));
      return;
  }
}

void Sessions::Create(Entry& e, Op op) {
  const SessionCreateOptions& c = op.req.create;
  std::string sid = op.req.session;
  Meta& m = e.meta;
  m.id = sid;
  m.template_name = c.template_name;
  m.env = c.env;
  m.labels = c.labels;
  m.idle_timeout_ms = c.idle_timeout_ms.value_or(config_.session_idle_timeout_ms);
  m.max_lifetime_ms = c.max_lifetime_ms.value_or(0);
  m.ephemeral = c.ephemeral;
  m.egress = c.egress;
  m.created_ms = WallMs();
  e.last_used_ms = m.created_ms;
  e.state = State::kCreating;
  e.create_started_us = MonotonicUs();
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
      ForgetRecord(sid);
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
  Meta& m = e.meta;
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
                             : EffectiveEgress(tc.egress, tc.name, m.egress).status();
    if (!bad.ok()) {
      auto waiting = std::move(e.waiting);
      sessions_.erase(sid);
      ForgetRecord(sid);
      for (Op& w : waiting) AnswerError(w, ErrorCode::kBadField, bad.message());
      return;
    }
  }
  std::string dir = Dir(sid);
  if (AdoptSpare(e, version)) {
    Status saved = SaveMeta(m);
    if (!saved.ok()) {
      StartFailed(e, saved.message());
      return;
    }
    MakeSpare(m.template_name, t, image, m.disk_bytes, version);
    Started(e);
    return;
  }
  if (!TakeBudget(m.memory_bytes)) {
    auto waiting = std::move(e.waiting);
    sessions_.erase(sid);
    ForgetRecord(sid);  // the id is free again: a retry may land on a host with room
    for (Op& w : waiting) AnswerError(w, ErrorCode::kHostFull, "this host has no room for another session");
    return;
  }
  e.budget = true;
  WriteRecord(e);
  Status s = ::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST ? SaveMeta(m) : ErrnoStatus("mkdir " + dir);
  if (!s.ok()) {
    StartFailed(e, s.message());
    return;
  }
  LogDebug("session disk being made", {{"session", sid}, {"bytes", m.disk_bytes}, {"from", image}});
  bool fresh = image.empty();
  pools_->MakeDisk(dir + "/disk.img", m.disk_bytes, image, [this, sid, fresh](std::string error, uint64_t) {
    auto it = sessions_.find(sid);
    if (it == sessions_.end()) return;
    if (!error.empty()) {
      StartFailed(it->second, "making its disk: " + error);
      return;
    }
    Launch(it->second, fresh);
  });
  MakeSpare(m.template_name, t, image, !image.empty() ? m.disk_bytes : limits_.default_disk_bytes, version);
}

// ---- Snapshots (snapshots.h) ---------------------------------------------------------------------

void Sessions::TakeSnapshot(Entry& e, Op op) {
  if (e.state != State::kRunning && e.state != State::kStopped) {
    AnswerError(op, ErrorCode::kSessionBusy, std::string("the session is ") + StateName(e.state));
    return;
  }
  auto shared = std::make_shared<Op>(std::move(op));
  std::string name = shared->req.name;
  snapshots_->CheckFree(name, [this, shared, name](Status free) {
    if (!free.ok()) {
      AnswerError(*shared, free.sys_errno() == EEXIST ? ErrorCode::kExists : ErrorCode::kInternal, free.message());
      return;
    }
    auto it = sessions_.find(shared->req.session);
    if (it == sessions_.end() || (it->second.state != State::kRunning && it->second.state != State::kStopped)) {
      AnswerError(*shared, ErrorCode::kSessionBusy, "the session changed state");
      return;
    }
    Entry& held = it->second;
    std::string base = held.meta.base, staging = snapshots_->StagingImage(name);
    uint64_t disk_bytes = held.meta.disk_bytes;
    auto copied = [this, shared, name, base, disk_bytes, staging](std::string error, uint64_t data_bytes) {
      if (error.empty() && data_bytes > config_.max_snapshot_bytes) {
        error = "the session's disk holds " + std::to_string(data_bytes) + " bytes, more than --max-snapshot-bytes";
      }
      if (!error.empty()) {
        ::unlink(staging.c_str());
        ::rmdir(staging.substr(0, staging.rfind('/')).c_str());
        AnswerError(*shared, data_bytes > config_.max_snapshot_bytes ? ErrorCode::kTooLarge : ErrorCode::kInternal,
                    "snapshot: " + error);
        return;
      }
      snapshots_->Publish(name, base, disk_bytes, [this, shared](Result<SnapshotMeta> meta) {
        if (!meta.ok()) {
          AnswerError(*shared, meta.status().sys_errno() == EFBIG ? ErrorCode::kTooLarge : ErrorCode::kInternal,
                      "snapshot: " + meta.status().message());
          return;
        }
        msgpack::sbuffer buf;
        msgpack::packer<msgpack::sbuffer> pk(buf);
        pk.pack_map(3);
        pk.pack(std::string("name")), pk.pack(meta->name);
        pk.pack(std::string("template")), pk.pack(meta->base);
        pk.pack(std::string("bytes")), pk.pack(meta->data_bytes);
        AnswerOp(*shared, OpAnswer{std::nullopt, std::string(buf.data(), buf.size())});
      });
    };
    if (held.state == State::kRunning && held.session) {
      std::string dir = staging.substr(0, staging.rfind('/'));
      ::mkdir(dir.c_str(), 0700);
      UniqueFd dest(::open(staging.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
      if (!dest) {
        if (errno == EEXIST) AnswerError(*shared, ErrorCode::kSessionBusy, "a snapshot of that name is being taken");
        else AnswerError(*shared, ErrorCode::kInternal, "snapshot: " + staging + ": " + std::strerror(errno));
        return;
      }
      held.session->Snapshot(std::move(dest), std::move(copied));
    } else {
      pools_->MakeDisk(staging, 0, Dir(held.meta.id) + "/disk.img", std::move(copied));
    }
  });
}

void Sessions::DeleteSnapshot(const Op& op) {
  auto shared = std::make_shared<Op>(op);
  snapshots_->Delete(op.req.name, [this, shared](Status s) {
    if (!s.ok()) AnswerError(*shared, ErrorCode::kInternal, "snapshot_delete: " + s.message());
    else AnswerOp(*shared, OpAnswer{std::nullopt, "\x80"});
  });
}

void Sessions::Resume(Entry& e) {
  e.state = State::kCreating;
  e.error.clear();
  e.create_started_us = MonotonicUs();
  if (!TakeBudget(e.meta.memory_bytes)) {
    e.state = State::kStopped;
    auto waiting = std::move(e.waiting);
    e.waiting.clear();
    for (Op& op : waiting) AnswerError(op, ErrorCode::kHostFull, "this host has no room to resume the session now");
    return;
  }
  e.budget = true;
  WriteRecord(e);
  Launch(e, false);
}

void Sessions::TakeKeeper(uint32_t t, std::function<void(Pools::KeeperHandle)> done) {
  auto& spares = spare_keepers_[t];
  if (!spares.empty()) {
    Pools::KeeperHandle k = std::move(spares.back());
    spares.pop_back();
    SpareKeeper(t);
    done(std::move(k));
    return;
  }
  pools_->SpawnSessionKeeper(t, std::move(done));
  SpareKeeper(t);
}

// The hooks of a session sandbox: they follow `owner` (the session id; empty while the sandbox
// is a warm spare of its template), which adoption changes.
Session::Hooks Sessions::HooksFor(std::shared_ptr<std::string> owner, const std::string& spare) {
  Session::Hooks hooks;
  hooks.on_ready = [this, owner, spare](Session&) {
    if (owner->empty()) {
      SpareReady(spare);
      return;
    }
    auto found = sessions_.find(*owner);
    if (found != sessions_.end()) Started(found->second);
  };
  hooks.on_start_failed = [this, owner, spare](Session&, const std::string& why) {
    if (owner->empty()) {
      DropSpare(spare, why);
      return;
    }
    auto found = sessions_.find(*owner);
    if (found != sessions_.end()) StartFailed(found->second, why);
  };
  hooks.on_ended = [this, owner, spare](Session&, const std::string& why, bool asked) {
    if (owner->empty()) {
      DropSpare(spare, why);
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

std::unique_ptr<Session> Sessions::StartSandbox(std::shared_ptr<std::string> owner, uint32_t t, const Meta& m,
                                                const std::string& dir, bool fresh, Pools::KeeperHandle k,
                                                std::string* error) {
  if (!k.channel.valid()) {
    pools_->ReleaseSessionSlot(k.slot);
    *error = "no session keeper could be started";
    return nullptr;
  }
  std::string path = dir + "/disk.img";
  UniqueFd disk(::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
  if (!disk.valid()) {
    pools_->ReleaseSessionSlot(k.slot);
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
  TakeKeeper(launching.template_index, [this, sid, fresh](Pools::KeeperHandle k) {
    auto it = sessions_.find(sid);
    if (it == sessions_.end() || it->second.state != State::kCreating || it->second.session) {
      pools_->ReleaseSessionSlot(k.slot);
      return;
    }
    Entry& e = it->second;
    std::string error;
    e.session = StartSandbox(std::make_shared<std::string>(sid), e.template_index, e.meta, Dir(sid), fresh,
                             std::move(k), &error);
    if (!e.session) StartFailed(e, error);
  });
}

// ---- Warm spares: a running session sandbox on a fresh disk, per template, adopted by the next
// create that asks for nothing but the defaults (the way a job takes a warm sandbox). ----------

Sessions::Meta Sessions::DefaultMeta(uint32_t t) const {
  const TemplateConfig& tc = config_.templates[t];
  Meta m;
  m.template_name = tc.name;
  m.memory_bytes = tc.sandbox.cgroup.memory_bytes;
  m.pids = tc.sandbox.cgroup.pids;
  m.cpus = static_cast<double>(tc.sandbox.cgroup.cpu_quota_us) / 100000.0;
  m.disk_bytes = limits_.default_disk_bytes;
  return m;
}

void Sessions::MakeSpare(const std::string& name, uint32_t t, const std::string& image, uint64_t disk_bytes,
                         const std::string& version) {
  // At most one per template, and a few in all: each holds a sandbox of the budget.
  if (config_.session_spares == 0 || draining_ || spares_.count(name) || spares_.size() >= kMostSpares) return;
  Meta m = DefaultMeta(t);
  m.template_name = name;
  m.disk_bytes = disk_bytes;
  // A spare is a running sandbox: it holds its share of the budget, and only if there is room.
  if (!pools_->TakeSessionBudget(m.memory_bytes)) return;
  Spare& sp = spares_[name];
  sp.t = t;
  sp.defaults = m;
  sp.version = version;
  sp.dir = config_.state_dir + "/sessions/w-" + std::to_string(next_spare_++);
  if (::mkdir(sp.dir.c_str(), 0700) != 0) {
    DropSpare(name, ErrnoStatus("mkdir " + sp.dir).message());
    return;
  }
  std::string dir = sp.dir;
  bool fresh = image.empty();
  pools_->MakeDisk(dir + "/disk.img", m.disk_bytes, image, [this, name, t, dir, m, fresh](std::string error, uint64_t) {
    auto it = spares_.find(name);
    if (it == spares_.end() || it->second.dir != dir) {
      ::unlink((dir + "/disk.img").c_str());  // given up while its disk was being made
      ::rmdir(dir.c_str());
      return;
    }
    if (!error.empty()) {
      DropSpare(name, "its disk: " + error);
      return;
    }
    TakeKeeper(t, [this, name, t, dir, m, fresh](Pools::KeeperHandle k) {
      auto found = spares_.find(name);
      if (found == spares_.end() || found->second.dir != dir || found->second.session) {
        pools_->ReleaseSessionSlot(k.slot);
        return;
      }
      std::string why;
      found->second.session = StartSandbox(found->second.owner, t, m, dir, fresh, std::move(k), &why);
      if (!found->second.session) DropSpare(name, why);
    });
  });
}

void Sessions::SpareReady(const std::string& name) {
  auto it = spares_.find(name);
  if (it != spares_.end()) it->second.ready = true;
}

// A spare that failed or ended: its budget, keeper and disk go; another is made on next use.
void Sessions::DropSpare(const std::string& name, const std::string& why) {
  auto it = spares_.find(name);
  if (it == spares_.end()) return;
  Spare sp = std::move(it->second);
  spares_.erase(it);
  if (!why.empty() && why != "stopped") LogWarn("warm session sandbox lost", {{"template", name}, {"why", why}});
  pools_->ReturnSessionBudget(sp.defaults.memory_bytes);
  if (sp.session) {
    pools_->ReleaseSessionSlot(sp.session->keeper_slot());
    if (!sp.session->ended()) sp.session->Stop();
    Collect(std::move(sp.session));
  }
  // The image is unmounted by the keeper when the sandbox ends; removing the file while it is
  // still mounted is harmless (the space returns when the loop device lets go).
  ::unlink((sp.dir + "/disk.img").c_str());
  ::rmdir(sp.dir.c_str());
}

// Takes the template's (or snapshot's, of that `version`) ready spare for a new session that asks
// for nothing but its defaults: the spare's directory becomes the session's.
bool Sessions::AdoptSpare(Entry& e, const std::string& version) {
  auto it = spares_.find(e.meta.template_name);
  if (it == spares_.end() || !it->second.ready || !it->second.session || !it->second.session->ready()) return false;
  const Meta& d = it->second.defaults;
  if (it->second.version != version) {
    DropSpare(e.meta.template_name, "");  // made from an older snapshot of that name
    return false;
  }
  if (e.meta.memory_bytes != d.memory_bytes || e.meta.pids != d.pids || e.meta.cpus != d.cpus ||
      e.meta.disk_bytes != d.disk_bytes) {
    return false;  // it asked for its own limits: a sandbox made for it
  }
  const std::string& sid = e.meta.id;
  if (::rename(it->second.dir.c_str(), Dir(sid).c_str()) != 0) {
    LogWarn("adopting a warm session sandbox failed", {{"session", sid}, {"error", std::strerror(errno)}});
    return false;
  }
  Spare sp = std::move(it->second);
  spares_.erase(it);
  *sp.owner = sid;
  sp.session->Adopt(sid, e.meta.env);
  e.session = std::move(sp.session);
  e.budget = true;  // the spare's share of the budget is the session's now
  return true;
}

// One keeper per template that has sessions is started ahead, so that a create does not wait
// for a fork of the spawner.
void Sessions::SpareKeeper(uint32_t t) {
  if (draining_ || spare_pending_.count(t) || !spare_keepers_[t].empty()) return;
  spare_pending_.insert(t);
  pools_->SpawnSessionKeeper(t, [this, t](Pools::KeeperHandle k) {
    spare_pending_.erase(t);
    if (!k.channel.valid() || draining_) {
      pools_->ReleaseSessionSlot(k.slot);
      return;
    }
    spare_keepers_[t].push_back(std::move(k));
  });
}

void Sessions::Started(Entry& e) {
  if (e.internal) {
    e.state = State::kRunning;
    if (auto start = std::move(e.job_start)) start(true, "");
    return;
  }
  auto running = [this](Entry& en) {
    double seconds = static_cast<double>(MonotonicUs() - en.create_started_us) / 1e6;
    LogInfo("session running", {{"session", en.meta.id}, {"seconds", seconds}});
    metrics_->ObserveSessionStart(seconds);
    SetState(en, State::kRunning);
    auto waiting = std::move(en.waiting);
    en.waiting.clear();
    for (Op& op : waiting) Serve(std::move(op));
  };
  // A session that narrows its template's policy: its slot is narrowed before anything of it
  // runs (the slot's old flows are forgotten off the loop: it is running once that is done).
  const TemplateConfig& tc = config_.templates[e.template_index];
  if (tc.network && network_ && e.session) {
    auto policy = EffectiveEgress(tc.egress, tc.name, e.meta.egress);
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
    if (e.budget) pools_->ReturnSessionBudget(e.meta.memory_bytes);
    e.budget = false;
    if (e.session) {
      pools_->ReleaseSessionSlot(e.session->keeper_slot());
      Collect(std::move(e.session));
    }
    e.state = State::kError;
    if (auto start = std::move(e.job_start)) start(false, why);
    return;
  }
  LogWarn("session could not start", {{"session", e.meta.id}, {"error", why}});
  if (e.budget) pools_->ReturnSessionBudget(e.meta.memory_bytes);
  e.budget = false;
  if (e.session) {
    pools_->ReleaseSessionSlot(e.session->keeper_slot());
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
  if (e.budget) pools_->ReturnSessionBudget(e.meta.memory_bytes);
  e.budget = false;
  if (e.session) {
    pools_->ReleaseSessionSlot(e.session->keeper_slot());
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
  RemoveFiles(sid);
  if (!e.internal) ForgetRecord(sid);
  auto waiting = std::move(e.waiting);
  sessions_.erase(sid);
  LogInfo("session destroyed", {{"session", sid}});
  if (op) AnswerOp(*op, OpAnswer{std::nullopt, "\x80"});
  for (Op& w : waiting) Serve(std::move(w));
}

void Sessions::Info(Entry& e, Op op) {
  if (!e.session || e.state != State::kRunning) {
    AnswerOp(op, OpAnswer{std::nullopt, EncodeSessionInfo(InfoOf(e))});
    return;
  }
  auto shared = std::make_shared<Op>(std::move(op));
  e.session->Stats([this, shared](std::optional<SessionStatsMsg> stats) {
    auto it = sessions_.find(shared->req.session);
    if (it == sessions_.end()) {
      AnswerError(*shared, ErrorCode::kSessionNotFound, "the session was destroyed");
      return;
    }
    SessionInfo info = InfoOf(it->second);
    if (stats) {
      info.memory_bytes = stats->memory_bytes;
      if (stats->memory_limit_bytes) info.memory_limit_bytes = stats->memory_limit_bytes;
      info.cpu_time_us = stats->cpu_usage_us;
      info.disk_bytes = stats->disk_used_bytes;
      if (stats->disk_total_bytes) info.disk_limit_bytes = stats->disk_total_bytes;
      info.processes = stats->processes;
    }
    AnswerOp(*shared, OpAnswer{std::nullopt, EncodeSessionInfo(info)});
  });
}

void Sessions::RunOp(Entry& e, Op op) {
  Session& s = *e.session;
  auto shared = std::make_shared<Op>(std::move(op));
  const SessionRequest& r = shared->req;
  auto answer = [this, shared](OpAnswer&& a) { AnswerOp(*shared, std::move(a)); };
  auto command_done = [this, shared](JobResult&& result, uint64_t seq) {
    op_session_.erase(shared->req.id);
    AnswerCommand(*shared, std::move(result), seq);
  };
  switch (r.op) {
    case SessionOp::kExec:
      op_session_[r.id] = r.session;
      s.Exec(r.id, r.command, r.as_root, shared->attempt, std::move(command_done));
      return;
    case SessionOp::kCode:
      op_session_[r.id] = r.session;
      s.Code(r.id, r.context, r.command, shared->attempt, std::move(command_done));
      return;
    case SessionOp::kContextRestart:
      s.ContextRestart(r.context, r.command.runtime, std::move(answer));
      return;
    case SessionOp::kSpawn:
      s.Spawn(r.command, r.as_root, r.stdin_pipe, std::move(answer));
      return;
    case SessionOp::kPs:
      answer(s.Ps());
      return;
    case SessionOp::kOutput:
      s.Output(r.pid, r.tail_lines, r.wait, r.wait_timeout_ms, std::move(answer));
      return;
    case SessionOp::kStdin:
      s.Stdin(r.pid, r.data, r.close, std::move(answer));
      return;
    case SessionOp::kKill:
      s.Kill(r.pid, r.signal, std::move(answer));
      return;
    case SessionOp::kExpose:
    case SessionOp::kUnexpose:
    case SessionOp::kPorts:
      answer(Ports(e, r));
      return;
    default:
      if (SessionOpOf(r.op).file_op) {
        metrics_->SessionFileBytes(r.raw.size());
        s.File(r.raw, std::move(answer));
        return;
      }
      answer(OpAnswer::Error(ErrorCode::kInternal, "operation not served"));
      return;
  }
}

void Sessions::SetNetwork(Network* network) {
  network_ = network;
  exposure_ = network->exposure.get();
}

OpAnswer Sessions::Ports(const Entry& e, const SessionRequest& r) {
  const TemplateConfig& t = config_.templates[e.template_index];
  if (exposure_ == nullptr || !t.expose) {
    return OpAnswer::Error(ErrorCode::kUnsupported, exposure_ == nullptr ? "this daemon serves no preview URLs (--net-preview-listen)"
                                                                         : "template '" + t.name + "' does not expose ports (expose = on)");
  }
  switch (r.op) {
    case SessionOp::kExpose: {
      uint32_t addr = SandboxAddress(t.sandbox.network, e.session->keeper_slot());
      auto p = exposure_->Expose(e.meta.id, addr, static_cast<uint16_t>(r.port));
      if (!p.ok()) return OpAnswer::Error(ErrorCode::kBadField, p.status().message());
      return OpAnswer{std::nullopt, PortExposure::Encode(*p)};
    }
    case SessionOp::kUnexpose:
      exposure_->Unexpose(e.meta.id, static_cast<uint16_t>(r.port));
      return OpAnswer{std::nullopt, std::string("\x80", 1)};  // {}
    default:
      return OpAnswer{std::nullopt, PortExposure::EncodeList(exposure_->List(e.meta.id))};
  }
}

// ---- Answers -----------------------------------------------------------------------------------

void Sessions::AnswerOp(const Op& op, OpAnswer answer) {
  OpResult res;
  res.id = op.req.id;
  res.op = std::string(SessionOpOf(op.req.op).name);
  res.session = op.req.session;
  res.error = std::move(answer.error);
  res.value = std::move(answer.value);
  // The agent's value comes from inside the sandbox: it must be one msgpack map, or it is not
  // put into a result at all.
  if (!res.error && !res.value.empty()) {
    mpk::Parsed p = mpk::ParseOne(res.value, mpk::TolerantLimit());
    if (p.fail != mpk::ParseFail::kNone || p.handle.get().type != msgpack::type::MAP) {
      res.value.clear();
      res.error = JobError{ErrorCode::kInternal, "the session's agent gave a malformed answer"};
    }
  }
  metrics_->SessionOp(res.op, res.error ? ErrorCodeName(res.error->code) : "ok",
                      static_cast<double>(MonotonicUs() - op.received_us) / 1e6);
  ledger_->FinishEncoded(res.id, op.attempt, EncodeOpResult(res), EncodeOpExitedEvent(res), op.stream, op.entry);
  --ops_in_flight_;
  if (on_idle_) on_idle_();
}

void Sessions::AnswerCommand(const Op& op, JobResult&& r, uint64_t seq) {
  r.id = op.req.id;
  r.attempt = op.attempt;
  r.worker = config_.consumer;
  metrics_->SessionOp(SessionOpOf(op.req.op).name, r.error ? ErrorCodeName(r.error->code) : OutcomeName(r.outcome),
                      static_cast<double>(MonotonicUs() - op.received_us) / 1e6);
  ledger_->FinishEncoded(r.id, op.attempt, EncodeResult(r), EncodeExitedEvent(seq, r), op.stream, op.entry);
  --ops_in_flight_;
  if (on_idle_) on_idle_();
}

void Sessions::AnswerError(const Op& op, ErrorCode code, std::string message) {
  if (IsCommand(op.req.op)) {
    JobResult r;
    r.outcome = code == ErrorCode::kCancelled ? Outcome::kCancelled
                : code == ErrorCode::kWorkerLost ? Outcome::kWorkerLost
                                                 : Outcome::kError;
    r.error = JobError{code, std::move(message)};
    AnswerCommand(op, std::move(r), 0);
    return;
  }
  AnswerOp(op, OpAnswer::Error(code, std::move(message)));
}

void Sessions::AnswerEntry(const std::string& stream, const std::string& entry,
                           const std::map<std::string, std::string>& fields, ErrorCode code, const std::string& message) {
  auto id_it = fields.find("id");
  std::string id = id_it != fields.end() && ValidJobId(id_it->second) ? id_it->second : "entry-" + entry;
  // What the op was, if that much can be read: its answer takes that op's form.
  std::string op_name, sid;
  auto req_it = fields.find("req");
  if (req_it != fields.end()) {
    try {
      mpk::Parsed p = mpk::ParseOne(req_it->second, mpk::TolerantLimit());
      if (p.fail == mpk::ParseFail::kNone && p.handle.get().type == msgpack::type::MAP) {
        const auto& m = p.handle.get().via.map;
        for (uint32_t i = 0; i < m.size; ++i) {
          if (!mpk::IsStr(m.ptr[i].key)) continue;
          std::string_view k = mpk::StrOf(m.ptr[i].key);
          if (k == "op") mpk::GetStr(m.ptr[i].val, &op_name);
          if (k == "session") mpk::GetStr(m.ptr[i].val, &sid);
        }
      }
    } catch (...) {
    }
  }
  const SessionOpInfo* info = FindSessionOp(op_name);
  std::string result, event;
  if (info != nullptr && !IsCommand(info->op)) {
    OpResult r;
    r.id = id;
    r.op = op_name;
    r.session = ValidJobId(sid) ? sid : "";
    r.error = JobError{code, message};
    result = EncodeOpResult(r);
    event = EncodeOpExitedEvent(r);
  } else {
    JobResult r;
    r.id = id;
    r.outcome = code == ErrorCode::kWorkerLost ? Outcome::kWorkerLost : Outcome::kError;
    r.worker = config_.consumer;
    r.error = JobError{code, message};
    result = EncodeResult(r);
    event = EncodeExitedEvent(0, r);
  }
  metrics_->SessionOp(info ? info->name : "unknown", ErrorCodeName(code), 0);
  ledger_->Answer(id, stream, entry, result, event);
}

// ---- One-shot jobs on snapshot templates ---------------------------------------------------------

void Sessions::RunJob(JobSpec spec, const std::string& stream, const std::string& entry) {
  ++ops_in_flight_;
  auto shared = std::make_shared<JobSpec>(std::move(spec));
  bool sent = ledger_->Claim(shared->id, stream, entry, shared->retries + 1,
                             [this, shared, stream, entry](JobLedger::Verdict v, uint32_t attempt) {
    JobResult r;
    r.id = shared->id;
    r.attempt = attempt;
    switch (v) {
      case JobLedger::Verdict::kRun:
        StartJob(shared, stream, entry, attempt);
        return;
      case JobLedger::Verdict::kCancelled:
        r.outcome = Outcome::kCancelled;
        r.error = JobError{ErrorCode::kCancelled, "cancelled by a client before it started"};
        ledger_->Finish(std::move(r), stream, entry, 0, Metrics::kOtherTemplate);
        break;
      case JobLedger::Verdict::kLost:
        r.outcome = Outcome::kWorkerLost;
        r.error = JobError{ErrorCode::kWorkerLost, "the daemon running this job died and no retry was left"};
        ledger_->Finish(std::move(r), stream, entry, 0, Metrics::kOtherTemplate);
        break;
      case JobLedger::Verdict::kDrop:
        ledger_->Ack(stream, entry);
        break;
      case JobLedger::Verdict::kUnknown:
        ledger_->Drop(entry);
        break;
    }
    --ops_in_flight_;
    if (on_idle_) on_idle_();
  });
  if (!sent) {
    ledger_->Drop(entry);
    --ops_in_flight_;
  }
}

void Sessions::StartJob(std::shared_ptr<JobSpec> spec, std::string stream, std::string entry, uint32_t attempt) {
  auto fail = [this, spec, stream, entry, attempt](ErrorCode code, const std::string& why) {
    JobResult r;
    r.id = spec->id;
    r.attempt = attempt;
    r.outcome = Outcome::kError;
    r.error = JobError{code, why};
    ledger_->Finish(std::move(r), stream, entry, 0, Metrics::kOtherTemplate);
    --ops_in_flight_;
    if (on_idle_) on_idle_();
  };
  snapshots_->Ensure(spec->template_name, [this, spec, stream, entry, attempt, fail](Result<SnapshotMeta> snap) {
    int base = snap.ok() ? FindTemplate(config_, snap->base) : -1;
    if (!snap.ok() || base < 0) {
      bool unknown = !snap.ok() && snap.status().sys_errno() == ENOENT;
      fail(unknown || snap.ok() ? ErrorCode::kBadField : ErrorCode::kSandboxFailed,
           unknown ? "unknown template '" + spec->template_name + "'"
                   : snap.ok() ? "template '" + spec->template_name + "': its base " + snap->base + " is not configured here"
                               : "template '" + spec->template_name + "': " + snap.status().message());
      return;
    }
    // Its own session, never listed: made like a session's create (a warm spare of the snapshot
    // when there is one), with the job's limits.
    std::string sid = "job." + spec->id;
    if (sessions_.count(sid)) {
      fail(ErrorCode::kInternal, "a run of this job is already here");
      return;
    }
    Entry& e = sessions_[sid];
    e.internal = true;
    Op create;
    create.req.op = SessionOp::kCreate;
    create.req.session = sid;
    create.req.create.template_name = spec->template_name;
    create.req.create.memory_bytes = spec->memory_bytes;
    create.req.create.pids = spec->pids;
    create.req.create.ephemeral = true;
    e.meta.id = sid;
    e.meta.template_name = spec->template_name;
    e.meta.ephemeral = true;
    e.meta.created_ms = WallMs();
    e.last_used_ms = e.meta.created_ms;
    e.state = State::kCreating;
    e.create_started_us = MonotonicUs();
    e.waiting.push_back(std::move(create));
    e.job_start = [this, sid, spec, stream, entry, attempt, fail](bool started, const std::string& why) {
      auto it = sessions_.find(sid);
      if (!started) {
        if (it != sessions_.end()) {
          RemoveFiles(sid);
          sessions_.erase(it);
        }
        fail(ErrorCode::kSandboxFailed, "could not start its sandbox: " + why);
        return;
      }
      it->second.waiting.clear();
      op_session_[spec->id] = sid;
      // The command's events (started, output, exited) are the job's, on its channel.
      it->second.session->Exec(spec->id, *spec, false, attempt,
                               [this, sid, stream, entry](JobResult&& r, uint64_t seq) {
                                 EndJob(sid, std::move(r), seq, stream, entry);
                               });
    };
    CreateOn(sid, static_cast<uint32_t>(base), snapshots_->Image(spec->template_name), snap->disk_bytes,
             snap->checksum + "@" + std::to_string(snap->created_ms));
  });
}

void Sessions::EndJob(const std::string& sid, JobResult&& r, uint64_t seq, const std::string& stream,
                      const std::string& entry) {
  op_session_.erase(r.id);
  ledger_->Finish(std::move(r), stream, entry, seq, Metrics::kOtherTemplate);
  --ops_in_flight_;
  auto it = sessions_.find(sid);
  if (it != sessions_.end()) {
    // Destroyed from the loop: this runs inside the session's command callback.
    Session* s = it->second.session.get();
    if (s != nullptr) {
      s->Defer([this, sid] {
        auto found = sessions_.find(sid);
        if (found != sessions_.end()) Destroy(found->second, std::nullopt);
      });
    } else {
      RemoveFiles(sid);
      sessions_.erase(it);
    }
  }
  if (on_idle_) on_idle_();
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
  while (!spares_.empty()) DropSpare(spares_.begin()->first, "");
  for (auto& [t, spares] : spare_keepers_) {
    for (auto& k : spares) pools_->ReleaseSessionSlot(k.slot);
    spares.clear();
  }
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
  int64_t now = WallMs();
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
  if (reconciled_ && !reading_) Read();
  FindLostHosts();
  ExpireCreates();
}

void Sessions::FindLostHosts() {
  cmd_->Command({"SMEMBERS", keys_.SessionHosts()}, [this](redisReply* r) {
    if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements == 0) return;
    std::vector<std::string> hosts;
    for (size_t i = 0; i < r->elements; ++i) hosts.push_back(ReplyString(r->element[i]));
    FindLiveDaemons(cmd_, keys_, config_, [this, hosts](std::optional<std::set<std::string>> alive) {
      if (!alive) return;
      for (const std::string& h : hosts) {
        if (alive->count(h) == 0) AnswerLostHost(h);
      }
    });
  });
}

// A daemon holding sessions is gone: its sessions are lost, and what is sent to it is answered.
void Sessions::AnswerLostHost(const std::string& consumer) {
  std::string message = "the host holding the session (" + consumer + ") is gone";
  cmd_->Eval(kSessionLoseScript, {"1", keys_.HostSessions(consumer), keys_.Session(""), message},
                [consumer](redisReply* r) {
                  if (r != nullptr && r->type == REDIS_REPLY_INTEGER && r->integer > 0) {
                    LogWarn("sessions of a daemon that is gone marked lost",
                            {{"consumer", consumer}, {"count", static_cast<uint64_t>(r->integer)}});
                  }
                });
  std::string stream = keys_.SessionStream(config_.queue, consumer);
  // Operations it had taken and not answered: they may have half happened.
  cmd_->Command({"XPENDING", stream, std::string(Keys::kGroup), "-", "+", std::to_string(kScanBatch), consumer},
                [this, stream](redisReply* p) {
                  if (p == nullptr || p->type != REDIS_REPLY_ARRAY || p->elements == 0) return;
                  std::vector<std::string> args = {"XCLAIM", stream, std::string(Keys::kGroup), config_.consumer, "1000"};
                  for (size_t i = 0; i < p->elements; ++i) {
                    if (p->element[i]->type == REDIS_REPLY_ARRAY && p->element[i]->elements > 0) {
                      args.push_back(ReplyString(p->element[i]->element[0]));
                    }
                  }
                  cmd_->Command(args, [this, stream](redisReply* c) {
                    if (c == nullptr || c->type != REDIS_REPLY_ARRAY) return;
                    for (size_t i = 0; i < c->elements; ++i) {
                      redisReply* en = c->element[i];
                      if (en->type != REDIS_REPLY_ARRAY || en->elements != 2) continue;
                      AnswerEntry(stream, ReplyString(en->element[0]), Fields(en->element[1]), ErrorCode::kWorkerLost,
                                  "the daemon holding the session died while this operation ran");
                    }
                  });
                });
  // New ones: session_lost (a destroy is done: the record goes; the files go if the host returns).
  cmd_->Command({"XREADGROUP", "GROUP", std::string(Keys::kGroup), config_.consumer, "COUNT", std::to_string(kScanBatch),
                 "STREAMS", stream, ">"},
                [this, stream, message](redisReply* r) {
                  if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return;
                  for (size_t i = 0; i < r->elements; ++i) {
                    redisReply* s = r->element[i];
                    if (s->type != REDIS_REPLY_ARRAY || s->elements != 2) continue;
                    for (size_t k = 0; k < s->element[1]->elements; ++k) {
                      redisReply* en = s->element[1]->element[k];
                      if (en->type != REDIS_REPLY_ARRAY || en->elements != 2) continue;
                      std::string entry = ReplyString(en->element[0]);
                      auto fields = Fields(en->element[1]);
                      auto decoded = DecodeSessionRequest(fields["req"], config_.limits, limits_);
                      auto* req = std::get_if<SessionRequest>(&decoded);
                      if (req != nullptr && req->op == SessionOp::kDestroy) {
                        std::string key = keys_.Session(req->session);
                        cmd_->Command({"HSET", key, "state", "destroyed"}, [](redisReply*) {});
                        cmd_->Command({"EXPIRE", key, std::to_string(config_.result_ttl_s)}, [](redisReply*) {});
                        cmd_->Command({"SREM", keys_.Sessions(), req->session}, [](redisReply*) {});
                        OpResult ok;
                        ok.id = req->id;
                        ok.op = "destroy";
                        ok.session = req->session;
                        ok.value = "\x80";
                        ledger_->Answer(req->id, stream, entry, EncodeOpResult(ok), EncodeOpExitedEvent(ok));
                        continue;
                      }
                      AnswerEntry(stream, entry, fields, ErrorCode::kSessionLost, message);
                    }
                  }
                });
}

// Creates nobody had room for within their wait_ms: host_full, from whichever daemon sees it.
void Sessions::ExpireCreates() {
  cmd_->Command({"XRANGE", intake_, "-", "+", "COUNT", "20"}, [this](redisReply* r) {
    if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return;
    int64_t now = WallMs();
    for (size_t i = 0; i < r->elements; ++i) {
      redisReply* en = r->element[i];
      if (en->type != REDIS_REPLY_ARRAY || en->elements != 2) continue;
      std::string entry = ReplyString(en->element[0]);
      auto fields = Fields(en->element[1]);
      auto decoded = DecodeSessionRequest(fields["req"], config_.limits, limits_);
      auto* req = std::get_if<SessionRequest>(&decoded);
      uint64_t wait_ms = req ? req->create.wait_ms : 30000;
      if (now - EntryMs(entry) < static_cast<int64_t>(wait_ms)) continue;
      OpResult res;
      res.id = req ? req->id : "entry-" + entry;
      res.op = req ? std::string(SessionOpOf(req->op).name) : "create";
      res.session = req ? req->session : "";
      res.error = JobError{ErrorCode::kHostFull, "no daemon had room for a new session within " +
                                                     std::to_string(wait_ms) + " ms"};
      cmd_->Eval(kSessionExpireScript, {"3", intake_, keys_.Result(res.id), keys_.Out(res.id), entry,
                     std::string(Keys::kGroup), EncodeOpResult(res), std::to_string(config_.result_ttl_s),
                     EncodeOpExitedEvent(res)},
                    [](redisReply*) {});
    }
  });
}

}  // namespace sandpool
