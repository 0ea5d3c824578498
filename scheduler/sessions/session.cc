#include "scheduler/sessions/session.h"

#include <signal.h>
#include <sys/wait.h>

#include <msgpack.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/clock.h"
#include "common/job_env.h"
#include "common/log.h"
#include "common/runtimes.h"
#include "common/syscalls.h"
#include "scheduler/sessions/code_context.h"
#include "scheduler/sessions/session_internal.h"

namespace sandpool {

Session::Session(struct event_base* base, std::string id, std::string worker,
                 std::vector<std::pair<std::string, std::string>> env, std::vector<std::string> template_env, Hooks hooks)
    : base_(base), id_(std::move(id)), worker_(std::move(worker)), env_(std::move(env)),
      template_env_(std::move(template_env)), hooks_(std::move(hooks)) {
  stop_answer_ev_ = evtimer_new(base_, &Session::OnStopUnanswered, this);
  deferred_ev_ = evtimer_new(base_, &Session::OnDeferred, this);
}

Session::~Session() {
  // Nothing may be left waiting: answer everything as if the sandbox ended.
  if (!ended_) OnGone("the daemon let go of the session", /*let_go=*/true);
  keeper_.Close();
  agent_.Close();
  contexts_.clear();
  commands_.clear();
  processes_.clear();
  event_free(stop_answer_ev_);
  event_free(deferred_ev_);
}

void Session::Defer(std::function<void()> later) {
  deferred_.push_back(std::move(later));
  struct timeval now = {0, 0};
  evtimer_add(deferred_ev_, &now);
}

void Session::OnDeferred(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<Session*>(arg);
  auto work = std::move(self->deferred_);
  self->deferred_.clear();
  for (auto& f : work) f();
}

// ---- Keeper and agent -------------------------------------------------------------------------

void Session::Start(SessionHost::KeeperHandle keeper, UniqueFd disk, const SessionStartMsg& start) {
  keeper_slot_ = keeper.slot;
  keeper_pid_ = keeper.pid;
  keeper_pidfd_ = std::move(keeper.pidfd);
  keeper_.Open(base_, std::move(keeper.channel), [this](Frame& f) { OnKeeperFrame(f); },
               [this](const Status& why) { OnGone("its keeper died: " + why.message()); });
  Status s = keeper_.Send(static_cast<uint16_t>(SessionMsg::kStart), EncodeMsg(start), {disk.get()});
  if (!s.ok()) LogWarn("session keeper unreachable", {{"session", id_}, {"error", s.message()}});
}

void Session::OnKeeperFrame(Frame& f) {
  switch (static_cast<SessionMsg>(f.type)) {
    case SessionMsg::kReady: {
      if (f.fds.size() != 1 || agent_.open()) return;
      agent_.Open(base_, std::move(f.fds[0]), [this](Frame& a) { OnAgentFrame(a); },
                  [this](const Status& why) {
                    // The agent is init: its socket closing means the sandbox is ending.
                    if (!stopping_) {
                      LogWarn("session sandbox ended on its own", {{"session", id_}, {"why", why.message()}});
                      died_ = "its init (the session's agent) ended";
                    }
                    EndSandbox();
                  });
      ready_ = true;
      hooks_.on_ready(*this);
      return;
    }
    case SessionMsg::kFailed: {
      SessionFailedMsg m;
      (void)DecodeMsg(f.payload, &m);
      ended_ = true;
      keeper_.Close();
      hooks_.on_start_failed(*this, m.message.substr(0, 2048));
      return;
    }
    case SessionMsg::kEnded: {
      SessionEndedMsg m;
      (void)DecodeMsg(f.payload, &m);
      std::string why = asked_ ? "stopped" : !died_.empty() ? died_ : m.why.empty() ? "its sandbox ended" : m.why.substr(0, 1024);
      // The keeper has ended the sandbox and released the disk, and waits for another Start.
      UniqueFd channel = keeper_.Release();
      if (m.reusable && channel.valid()) {
        ended_keeper_ = SessionHost::KeeperHandle{keeper_slot_, keeper_pid_, std::move(channel), std::move(keeper_pidfd_)};
      }
      OnGone(why);
      return;
    }
    case SessionMsg::kSnapshotDone: {
      SnapshotDoneMsg m;
      if (!DecodeMsg(f.payload, &m).ok()) m.error = "bad answer from the keeper";
      if (snapshot_waiting_.empty()) return;
      auto done = std::move(snapshot_waiting_.front());
      snapshot_waiting_.erase(snapshot_waiting_.begin());
      done(m.error.substr(0, 1024), m.data_bytes);
      return;
    }
    case SessionMsg::kStats: {
      SessionStatsMsg m;
      bool ok = DecodeMsg(f.payload, &m).ok();
      if (stats_waiting_.empty()) return;
      auto done = std::move(stats_waiting_.front());
      stats_waiting_.erase(stats_waiting_.begin());
      done(ok ? std::optional<SessionStatsMsg>(m) : std::nullopt);
      return;
    }
    default:
      return;
  }
}

std::optional<SessionHost::KeeperHandle> Session::TakeEndedKeeper() {
  return std::exchange(ended_keeper_, std::nullopt);
}

void Session::Stop() {
  asked_ = true;
  EndSandbox();
}

void Session::EndSandbox() {
  if (ended_ || stopping_) return;
  stopping_ = true;
  // Processes die with the sandbox; their ends are reported by OnGone.
  Status s = keeper_.Send(static_cast<uint16_t>(SessionMsg::kStop), EncodeMsg(SessionStopMsg{}));
  if (!s.ok()) {
    OnGone("stopped");
    return;
  }
  struct timeval tv = TimevalMs(kStopAnswerMs);
  evtimer_add(stop_answer_ev_, &tv);
}

void Session::OnStopUnanswered(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<Session*>(arg);
  if (self->ended_) return;
  LogWarn("session keeper did not end the sandbox in time; killing it", {{"session", self->id_}});
  if (self->keeper_pidfd_.valid()) (void)sys::PidfdSendSignal(self->keeper_pidfd_.get(), SIGKILL);
  self->OnGone("stopped (its keeper had to be killed)");
}

// The sandbox is gone: everything waiting is answered, then on_ended.
void Session::OnGone(const std::string& why, bool let_go) {
  if (ended_) return;
  ended_ = true;
  evtimer_del(stop_answer_ev_);
  keeper_.Close();
  agent_.Close();
  keeper_pidfd_.reset();
  auto waiting = std::move(waiting_);
  waiting_.clear();
  for (auto& [req, fn] : waiting) fn(nullptr);
  auto exits = std::move(exits_);
  exits_.clear();
  for (auto& [pid, fn] : exits) fn(nullptr);
  auto stats = std::move(stats_waiting_);
  stats_waiting_.clear();
  for (auto& fn : stats) fn(std::nullopt);
  auto snaps = std::move(snapshot_waiting_);
  snapshot_waiting_.clear();
  for (auto& fn : snaps) fn("the session stopped during the snapshot", 0);
  if (let_go) return;
  // Ending before Ready is a start that failed: reported as on_ended, Sessions would serve the
  // waiting create again and resume a sandbox that never started, without end.
  if (!ready_) {
    if (hooks_.on_start_failed) hooks_.on_start_failed(*this, why);
    return;
  }
  if (hooks_.on_ended) hooks_.on_ended(*this, why, asked_);
}

void Session::SendAgent(AgentMsg type, std::string payload, std::string_view head) {
  Status s = agent_.SendOwned(static_cast<uint16_t>(type), head, std::move(payload));
  if (!s.ok()) LogDebug("session agent unreachable", {{"session", id_}, {"error", s.message()}});
  // A failed send means the agent is gone: its channel's closed handler ends the session.
}

void Session::OnAgentFrame(Frame& f) {
  // Runs (once) and forgets whoever waits under `key`; unknown keys are answers nobody awaits.
  auto answer = [](auto& waiters, const auto& key, auto* arg) {
    auto it = waiters.find(key);
    if (it == waiters.end()) return;
    auto fn = std::move(it->second);
    waiters.erase(it);
    fn(arg);
  };
  switch (static_cast<AgentMsg>(f.type)) {
    case AgentMsg::kStarted:
    case AgentMsg::kReply: {
      AgentReqOf m;
      if (DecodeMsg(f.payload, &m).ok()) answer(waiting_, m.req, &f);
      return;
    }
    case AgentMsg::kExited: {
      AgentExitedMsg m;
      if (DecodeMsg(f.payload, &m).ok()) answer(exits_, m.pid, &m);
      return;
    }
    default:
      return;
  }
}

void Session::StartProcess(AgentExecMsg m, StartedFn started, ExitedFn exited) {
  if (!ready() || stopping_) {
    Defer([started = std::move(started)] { started(nullptr, {}); });
    return;
  }
  m.req = NextReq();
  waiting_[m.req] = [this, started = std::move(started), exited = std::move(exited)](Frame* f) mutable {
    if (f == nullptr) {
      started(nullptr, {});
      return;
    }
    AgentStartedMsg s;
    (void)DecodeMsg(f->payload, &s);
    if (s.error == 0 && (f->fds.size() != 3 || s.pid <= 1)) {
      s.error = EPROTO;
      s.stage = "agent";
    }
    if (s.error == 0) exits_[s.pid] = std::move(exited);
    started(&s, s.error == 0 ? std::move(f->fds) : std::vector<UniqueFd>{});
  };
  SendAgent(AgentMsg::kExec, EncodeMsg(m));
}

void Session::Signal(int64_t pid, int signal, std::function<void(bool)> done) {
  if (!ready()) {
    if (done) Defer([done] { done(false); });
    return;
  }
  uint64_t req = NextReq();
  waiting_[req] = [done](Frame* f) {
    AgentReplyMsg r;
    bool ok = f != nullptr && DecodeMsg(f->payload, &r).ok() && r.error.empty();
    if (done) done(ok);
  };
  SendAgent(AgentMsg::kSignal, EncodeMsg(AgentSignalMsg{req, pid, signal}));
}

std::vector<std::string> Session::CommandEnv(const JobSpec& command) const {
  std::vector<std::pair<std::string, std::string>> env = command.env;
  for (const auto& kv : env_) {
    bool set = std::any_of(env.begin(), env.end(), [&](const auto& e) { return e.first == kv.first; });
    if (!set) env.push_back(kv);
  }
  return JobEnvironment(env, template_env_);
}

// ---- Commands ----------------------------------------------------------------------------------

void Session::Exec(const std::string& op_id, const JobSpec& command, bool as_root, uint32_t attempt, CommandDone done) {
  auto owned = std::make_unique<Command>();
  Command& run = *owned;
  run.op_id = op_id;
  run.attempt = attempt;
  run.spec = command;
  run.done = std::move(done);
  run.session = this;
  AgentExecMsg m;
  if (command.shell) {
    m.shell = *command.shell;
  } else if (command.code) {
    const RuntimeInfo* rt = FindRuntime(command.runtime);
    m.argv = rt ? SourceArgv(*rt, *command.code) : std::vector<std::string>{};
    if (m.argv.empty()) {
      JobResult r;
      r.id = op_id;
      r.attempt = attempt;
      r.worker = worker_;
      r.error = JobError{ErrorCode::kTooLarge, "code: longer than one argument may be for " + command.runtime};
      Defer([done = std::move(run.done), r = std::move(r)]() mutable { done(std::move(r), 0); });
      return;
    }
  } else {
    m.argv = command.argv;
  }
  m.env = CommandEnv(command);
  m.cwd = command.cwd.empty() ? "/work" : command.cwd;
  m.as_root = as_root;
  m.stdin_pipe = true;
  commands_[op_id] = std::move(owned);
  StartProcess(
      std::move(m),
      [this, op_id](const AgentStartedMsg* s, std::vector<UniqueFd> fds) {
        auto it = commands_.find(op_id);
        if (it == commands_.end()) return;
        Command& c = *it->second;
        if (s == nullptr) {
          c.gone = true;
          FinishCommand(c);
          return;
        }
        if (s->error != 0) {
          c.exited = true;
          c.exit.error = s->error;
          c.exit.stage = s->stage;
          FinishCommand(c);
          return;
        }
        c.pid = s->pid;
        if (c.kill != KillReason::kNone) Signal(c.pid, SIGKILL, nullptr);  // cancelled before it started
        Publish(OpChannel(op_id), EncodeStartedEvent(c.seq++, worker_, c.attempt));
        ProcessIo::Hooks io;
        io.on_output = [this, &c](std::string_view stream, std::string_view data) {
          Publish(OpChannel(c.op_id), EncodeOutputEvent(c.seq++, stream, data));
        };
        io.on_cap = [this, &c] { KillCommand(c, KillReason::kOutputLimit); };
        io.on_eof = [this, &c] {
          if (c.exited) Defer([this, id = c.op_id] {
              auto found = commands_.find(id);
              if (found != commands_.end() && !found->second->checking) FinishCommand(*found->second);
            });
        };
        c.io.Start(base_, std::move(fds[0]), std::move(fds[1]), std::move(fds[2]), c.spec.stdin_data,
                   c.spec.max_output_bytes, false, false, std::move(io));
        c.timeout_ev = evtimer_new(base_, [](evutil_socket_t, short, void* arg) {
          auto* cmd = static_cast<Command*>(arg);
          cmd->session->KillCommand(*cmd, KillReason::kTimeout);
        }, &c);
        struct timeval tv = TimevalMs(static_cast<int64_t>(c.spec.timeout_ms));
        evtimer_add(c.timeout_ev, &tv);
      },
      [this, op_id](const AgentExitedMsg* e) {
        auto it = commands_.find(op_id);
        if (it == commands_.end()) return;
        Command& c = *it->second;
        if (e == nullptr) {
          c.gone = true;
          c.io.GiveUp();
          FinishCommand(c);
          return;
        }
        c.exited = true;
        c.exit = *e;
        // Killed, and not by us: the session's limits may have done it (the OOM killer, or a
        // fork bomb's refused forks): the cgroup's counters say, as for a job (outcome.h).
        bool killed = e->error == 0 && WIFSIGNALED(e->wait_status) && WTERMSIG(e->wait_status) == SIGKILL;
        if ((killed || (e->error == 0 && WIFEXITED(e->wait_status) && WEXITSTATUS(e->wait_status) != 0)) &&
            c.kill == KillReason::kNone) {
          c.checking = true;
          Stats([this, op_id](std::optional<SessionStatsMsg> st) {
            auto found = commands_.find(op_id);
            if (found == commands_.end()) return;
            Command& cmd = *found->second;
            cmd.checking = false;
            if (st) {
              if (st->oom_kills > oom_seen_) cmd.oom_kills = st->oom_kills - oom_seen_;
              if (st->pids_max_hits > pids_seen_) cmd.pids_max_hits = st->pids_max_hits - pids_seen_;
              oom_seen_ = std::max(oom_seen_, st->oom_kills);
              pids_seen_ = std::max(pids_seen_, st->pids_max_hits);
            }
            if (cmd.io.eof() || cmd.after_exit_ev == nullptr) FinishCommand(cmd);
          });
        }
        if (c.io.eof()) {
          if (!c.checking) FinishCommand(c);
          return;
        }
        // Output still buffered in the pipes is read for a moment more (processes the command
        // left in the background may hold them open for much longer).
        c.after_exit_ev = evtimer_new(base_, [](evutil_socket_t, short, void* arg) {
          auto* cmd = static_cast<Command*>(arg);
          cmd->io.GiveUp();
          if (!cmd->checking) cmd->session->FinishCommand(*cmd);
        }, &c);
        struct timeval tv = TimevalMs(kAfterExitMs);
        evtimer_add(c.after_exit_ev, &tv);
      });
}

void Session::KillCommand(Command& c, KillReason why) {
  if (c.kill != KillReason::kNone || c.exited) return;
  c.kill = why;
  // Not started yet (the agent may hold a shell line until a warm shell is ready): it is killed
  // as soon as it has a pid.
  if (c.pid != 0) Signal(c.pid, SIGKILL, nullptr);
}

bool Session::Cancel(const std::string& op_id) {
  auto it = commands_.find(op_id);
  if (it != commands_.end()) {
    KillCommand(*it->second, KillReason::kCancel);
    return true;
  }
  for (auto& [name, ctx] : contexts_) {
    if (ctx->Cancel(op_id)) return true;
  }
  return false;
}

std::vector<std::string> Session::RunningCommands() const {
  std::vector<std::string> ids;
  for (const auto& [id, c] : commands_) ids.push_back(id);
  for (const auto& [name, ctx] : contexts_) ctx->Calls(&ids);
  return ids;
}

void Session::FinishCommand(Command& c) {
  if (c.finished) return;
  c.finished = true;
  if (c.timeout_ev) evtimer_del(c.timeout_ev);
  if (c.after_exit_ev) evtimer_del(c.after_exit_ev);
  JobResult r;
  r.id = c.op_id;
  r.attempt = c.attempt;
  r.worker = worker_;
  FoldOutput(std::move(c.io.output()), &r);
  if (c.exited) {
    ExitedMsg x = AsExited(c.exit);
    // Only a command that died of them is charged with them: other processes of the session
    // may have hit a limit meanwhile (a kill by the OOM killer, or a fork refused).
    bool signaled = x.have_status && WIFSIGNALED(x.wait_status) && WTERMSIG(x.wait_status) == SIGKILL;
    x.oom_kills = signaled ? c.oom_kills : 0;
    x.pids_max_hits = c.pids_max_hits;
    FillOutcome(x, c.kill, &r);
  } else {
    r.outcome = Outcome::kError;
    r.error = JobError{ErrorCode::kSessionStopped, "the session stopped before the command ended"};
  }
  if (c.gone && c.exited && r.outcome != Outcome::kCancelled) {
    // It ended with the sandbox: not the command's doing.
    r.outcome = Outcome::kError;
    r.error = JobError{ErrorCode::kSessionStopped, "the session stopped before the command ended"};
  }
  uint64_t seq = c.seq++;
  CommandDone done = std::move(c.done);
  std::string id = c.op_id;
  // The ProcessIo may be inside its own callback now: the Command goes from the loop.
  Defer([this, id] { commands_.erase(id); });
  c.io.GiveUp();
  done(std::move(r), seq);
}

void Session::Code(const std::string& op_id, const std::string& context, const JobSpec& command, uint32_t attempt,
                   CommandDone done) {
  std::string key = command.runtime + ":" + context;
  auto& ctx = contexts_[key];
  if (!ctx) ctx = std::make_unique<CodeContext>(*this, context, command.runtime);
  ctx->Call(op_id, command, attempt, std::move(done));
}

void Session::ContextRestart(const std::string& context, const std::string& runtime, AnswerDone done) {
  auto it = contexts_.find(runtime + ":" + context);
  if (it != contexts_.end()) it->second->Restart();
  Defer([done = std::move(done)] { done(OpAnswer{std::nullopt, "\x80"}); });
}

// ---- Files and figures --------------------------------------------------------------------------

void Session::File(std::string request, AnswerDone done) {
  if (!ready()) {
    done(OpAnswer::Error(ErrorCode::kSessionStopped, "the session is not running"));
    return;
  }
  uint64_t req = NextReq();
  waiting_[req] = [done = std::move(done)](Frame* f) {
    AgentReplyMsg r;
    if (f == nullptr || !DecodeMsg(f->payload, &r).ok()) {
      done(OpAnswer::Error(ErrorCode::kSessionStopped, "the session stopped before the operation ended"));
      return;
    }
    if (!r.error.empty()) {
      // The agent is inside the sandbox: only codes of the protocol pass, with a bounded message.
      ErrorCode code = ParseErrorCode(r.error).value_or(ErrorCode::kInternal);
      done(OpAnswer::Error(code, r.message.substr(0, 2048)));
      return;
    }
    done(OpAnswer{std::nullopt, r.value.empty() ? std::string("\x80") : std::move(r.value)});
  };
  std::string head = EncodeMsgHead(AgentFileMsg{req, {}}, request.size());
  SendAgent(AgentMsg::kFile, std::move(request), head);
}

void Session::Stats(std::function<void(std::optional<SessionStatsMsg>)> done) {
  if (ended_ || !keeper_.open()) {
    done(std::nullopt);
    return;
  }
  stats_waiting_.push_back(std::move(done));
  (void)keeper_.Send(static_cast<uint16_t>(SessionMsg::kStatsRequest), EncodeMsg(SessionStatsMsg{}));
}

void Session::Snapshot(UniqueFd dest, std::function<void(std::string, uint64_t)> done) {
  if (ended_ || !keeper_.open() || stopping_) {
    done("the session is not running", 0);
    return;
  }
  Status s = keeper_.Send(static_cast<uint16_t>(SessionMsg::kSnapshot), EncodeMsg(SessionStopMsg{}), {dest.get()});
  if (!s.ok()) {
    done("its keeper cannot be reached: " + s.message(), 0);
    return;
  }
  snapshot_waiting_.push_back(std::move(done));
}

}  // namespace sandpool
