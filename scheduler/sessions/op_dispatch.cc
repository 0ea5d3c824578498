// Sessions' operation dispatch (sessions.h): entries of the session intake routed to their
// holder (SESSION_ROUTE), this daemon's operations claimed (CLAIM, one attempt) and served by
// state, each answered exactly once (op_answers.h).
#include <msgpack.hpp>

#include "common/clock.h"
#include "common/log.h"
#include "scheduler/jobs/claim_settle.h"
#include "scheduler/net/net_setup.h"
#include "scheduler/net/port_exposure.h"
#include "scheduler/redis/scripts.h"
#include "scheduler/sessions/sessions.h"
#include "worker/sandbox/netns_setup.h"

namespace sandpool {

// ---- Reading (op_reader.h): routing creates, claiming operations -----------------------------------------------------------------------------------

bool Sessions::HasRoom() const {
  return !draining_ && (host_->SessionFits(config_.templates[0].sandbox.cgroup.memory_bytes) || !spares_->empty());
}

bool Sessions::TakeBudget(uint64_t memory) {
  while (!host_->TakeSessionBudget(memory)) {
    if (!spares_->DropOne()) return false;  // a spare gives way to a session
  }
  return true;
}

void Sessions::OnIntakeEntry(const std::string& entry, const std::map<std::string, std::string>& fields) {
  if (fields.empty()) {  // deleted meanwhile
    ledger_->Ack(intake_, entry);
    return;
  }
  auto req_it = fields.find("req");
  auto decoded = DecodeSessionRequest(req_it == fields.end() ? std::string_view() : req_it->second, config_.limits, limits_);
  if (auto* err = std::get_if<JobError>(&decoded)) {
    answers_.Entry(intake_, entry, fields, err->code, err->message);
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
      EncodedOpAnswer bytes = EncodeOpAnswer(res);
      ledger_->Answer(id, intake_, entry, bytes.result, bytes.event);
    });
    return;
  }
  std::string op(SessionOpOf(req.op).name);
  bool sent = cmd_->Eval(kSessionRouteScript,
      {"3", intake_, keys_.Session(req.session), keys_.Sessions(), entry,
       std::string(Keys::kGroup), config_.consumer, keys_.SessionIntake(config_.queue) + ":", std::to_string(clock_.WallMs()), op,
       req.id, req_it->second, req.session, keys_.HostSessions(""), keys_.SessionHosts()},
      [this, entry, fields, sid = req.session](redisReply* r) {
        std::string verdict = ReplyString(r);
        if (verdict == "none") {
          answers_.Entry(intake_, entry, fields, ErrorCode::kSessionNotFound, "no session " + sid);
        } else if (r != nullptr && r->type == REDIS_REPLY_ERROR) {
          LogWarn("routing a session request failed", {{"entry", entry}, {"error", verdict}});
        }
      });
  (void)sent;  // not sent: it stays pending here, and the own scan after reconnecting finds it
}

void Sessions::OnOwnEntry(const std::string& entry, std::map<std::string, std::string>& fields) {
  if (fields.empty()) {
    ledger_->Ack(own_stream_, entry);
    return;
  }
  // A file written to the session is most of the request: its buffer moves on, not a copy.
  std::string none;
  auto req_it = fields.find("req");
  auto decoded = TakeSessionRequest(req_it == fields.end() ? none : req_it->second, config_.limits, limits_);
  if (auto* err = std::get_if<JobError>(&decoded)) {
    answers_.Entry(own_stream_, entry, fields, err->code, err->message);
    return;
  }
  Op op;
  op.stream = own_stream_;
  op.entry = entry;
  op.req = std::move(std::get<SessionRequest>(decoded));
  op.received_us = MonotonicUs();  // op_answers measures its metrics against the real clock
  auto id_it = fields.find("id");
  if (id_it == fields.end() || id_it->second != op.req.id) {
    fields["req"] = std::move(op.req.raw);  // the answer takes the form of the op it names
    answers_.Entry(own_stream_, entry, fields, ErrorCode::kBadField, "id: the entry's id field and the request's differ");
    return;
  }
  ++ops_in_flight_;
  own_entries_.insert(entry);
  auto shared = std::make_shared<Op>(std::move(op));
  bool sent = ledger_->Claim(shared->req.id, own_stream_, entry, 1, [this, shared](JobLedger::Verdict v, uint32_t attempt) {
    shared->attempt = attempt;
    if (v == JobLedger::Verdict::kRun) {
      Serve(std::move(*shared));
      return;
    }
    bool answered = false;
    SettleClaim(ledger_, v, shared->stream, shared->entry,
                "the daemon holding the session died while this operation ran", [&](JobError error) {
                  answered = true;
                  AnswerError(*shared, error.code, std::move(error.message));
                });
    if (!answered) OpDone(shared->entry);
  });
  if (!sent) {
    own_entries_.erase(entry);
    --ops_in_flight_;
  }
}

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
  e.last_used_ms = clock_.WallMs();
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
        s.File(std::move(shared->req.raw), std::move(answer));  // used by nothing after this
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
  answers_.Op(op, std::move(answer));
  OpDone(op.entry);
}

void Sessions::AnswerCommand(const Op& op, JobResult&& r, uint64_t seq) {
  answers_.Command(op, std::move(r), seq);
  OpDone(op.entry);
}

void Sessions::AnswerError(const Op& op, ErrorCode code, std::string message) {
  answers_.Error(op, code, std::move(message));
  OpDone(op.entry);
}

void Sessions::OpDone(const std::string& own_entry) {
  if (!own_entry.empty()) own_entries_.erase(own_entry);
  --ops_in_flight_;
  if (on_idle_) on_idle_();
}

}  // namespace sandpool
