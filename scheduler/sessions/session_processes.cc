// Session's background processes (session.h: spawn, ps, output, stdin, kill): started through
// the agent like a command, followed after they exit, their output kept (the newest bytes).
#include <algorithm>

#include "common/clock.h"
#include "common/log.h"
#include "scheduler/sessions/session_internal.h"

namespace sandpool {

// ---- Background processes ---------------------------------------------------------------------

void Session::Spawn(const JobSpec& command, bool as_root, bool stdin_pipe, AnswerDone done) {
  AgentExecMsg m;
  std::string shown;
  if (command.shell) {
    m.shell = *command.shell;
    shown = *command.shell;
  } else {
    m.argv = command.argv;
    for (const std::string& a : command.argv) shown += (shown.empty() ? "" : " ") + a;
  }
  m.env = CommandEnv(command);
  m.cwd = command.cwd.empty() ? "/work" : command.cwd;
  m.as_root = as_root;
  m.stdin_pipe = stdin_pipe;
  std::string id = "p" + std::to_string(next_process_++);
  auto owned = std::make_unique<Process>();
  owned->id = id;
  owned->command = shown.substr(0, 4096);
  owned->session = this;
  processes_[id] = std::move(owned);
  StartProcess(
      std::move(m),
      [this, id, stdin_pipe, done = std::move(done)](const AgentStartedMsg* s, std::vector<UniqueFd> fds) {
        auto it = processes_.find(id);
        if (it == processes_.end()) return;
        Process& p = *it->second;
        if (s == nullptr || s->error != 0) {
          processes_.erase(it);
          if (s == nullptr) {
            done(OpAnswer::Error(ErrorCode::kSessionStopped, "the session stopped"));
          } else {
            bool missing = s->stage == "exec" && s->error == ENOENT;
            done(OpAnswer::Error(ErrorCode::kExecFailed, s->stage + ": " + std::strerror(s->error) +
                                                              (missing ? " (no such program)" : "")));
          }
          return;
        }
        p.pid = s->pid;
        p.started_ms = WallMs();
        ProcessIo::Hooks io;
        io.on_output = [this, &p](std::string_view stream, std::string_view data) {
          Publish(hooks_.process_channel(p.id), EncodeProcessOutputEvent(p.seq++, stream, data));
        };
        io.on_eof = [this, &p] {
          p.eof = true;
          if (p.exited) Defer([this, pid = p.id] {
              auto found = processes_.find(pid);
              if (found != processes_.end()) ProcessEnded(*found->second);
            });
        };
        UniqueFd in = std::move(fds[0]);
        if (!stdin_pipe) in.reset();
        p.io.Start(base_, std::move(in), std::move(fds[1]), std::move(fds[2]), {}, kProcessOutputBytes, true, true,
                   std::move(io));
        msgpack::sbuffer buf;
        msgpack::packer<msgpack::sbuffer> pk(buf);
        pk.pack_map(1);
        PackStr(pk, "pid");
        PackStr(pk, p.id);
        done(OpAnswer{std::nullopt, Str(buf)});
      },
      [this, id](const AgentExitedMsg* e) {
        auto it = processes_.find(id);
        if (it == processes_.end()) return;
        Process& p = *it->second;
        p.exited = true;
        p.ended_ms = WallMs();
        if (e != nullptr && e->error == 0) {
          if (WIFEXITED(e->wait_status)) p.exit_code = WEXITSTATUS(e->wait_status);
          if (WIFSIGNALED(e->wait_status)) p.signal = WTERMSIG(e->wait_status);
        } else if (e == nullptr) {
          p.signal = SIGKILL;  // it died with the sandbox
        } else {
          p.exit_code = 127;
        }
        if (p.eof || e == nullptr) {
          ProcessEnded(p);
          return;
        }
        p.after_exit_ev = evtimer_new(base_, [](evutil_socket_t, short, void* arg) {
          auto* proc = static_cast<Process*>(arg);
          proc->session->ProcessEnded(*proc);
        }, &p);
        struct timeval tv = TimevalMs(kAfterExitMs);
        evtimer_add(p.after_exit_ev, &tv);
      });
}

// A background process ended and its output was read: it is published, and whoever waited for
// it gets its output.
void Session::ProcessEnded(Process& p) {
  if (p.done) return;
  p.done = true;
  if (p.after_exit_ev) evtimer_del(p.after_exit_ev);
  p.io.GiveUp();
  Publish(hooks_.process_channel(p.id), EncodeProcessExitedEvent(p.seq++, p.exit_code, p.signal));
  auto waiters = std::move(p.waiters);
  p.waiters.clear();
  for (auto& w : waiters) {
    event_free(w.timer);
    w.done(OutputOf(p, w.tail_lines));
  }
  // Bounded memory: the oldest exited processes are forgotten.
  std::vector<std::pair<int64_t, std::string>> gone;
  for (const auto& [pid, proc] : processes_) {
    if (proc->done) gone.emplace_back(proc->ended_ms, pid);
  }
  if (gone.size() > kExitedProcesses) {
    std::sort(gone.begin(), gone.end());
    for (size_t i = 0; i + kExitedProcesses < gone.size(); ++i) {
      Defer([this, pid = gone[i].second] { processes_.erase(pid); });
    }
  }
}

size_t Session::processes_running() const {
  size_t n = 0;
  for (const auto& [id, p] : processes_) n += !p->exited;
  return n + commands_.size();
}

OpAnswer Session::Ps() const {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(1);
  PackStr(pk, "processes");
  size_t n = 0;
  for (const auto& [id, p] : processes_) n += p->pid != 0;
  pk.pack_array(static_cast<uint32_t>(n));
  for (const auto& [id, p] : processes_) {
    if (p->pid == 0) continue;  // still starting
    pk.pack_map(7);
    PackStr(pk, "pid");
    PackStr(pk, p->id);
    PackStr(pk, "command");
    PackStr(pk, p->command);
    PackStr(pk, "state");
    PackStr(pk, p->exited ? "exited" : "running");
    PackStr(pk, "exit_code");
    PackOptInt(pk, p->exit_code);
    PackStr(pk, "signal");
    PackOptInt(pk, p->signal);
    PackStr(pk, "started_ms");
    pk.pack_int64(p->started_ms);
    PackStr(pk, "ended_ms");
    if (p->exited) pk.pack_int64(p->ended_ms);
    else pk.pack_nil();
  }
  return OpAnswer{std::nullopt, Str(buf)};
}

OpAnswer Session::OutputOf(const Process& p, std::optional<uint64_t> tail_lines) const {
  const ProcessIo::Output& out = const_cast<Process&>(p).io.output();
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(7);
  for (int i = 0; i < 2; ++i) {
    std::string_view data = out.data[i];
    if (tail_lines) data = TailLines(data, *tail_lines);
    PackStr(pk, i == 0 ? "stdout" : "stderr");
    PackBin(pk, data);
  }
  PackStr(pk, "stdout_truncated");
  pk.pack(out.truncated[0] || out.dropped[0] > 0);
  PackStr(pk, "stderr_truncated");
  pk.pack(out.truncated[1] || out.dropped[1] > 0);
  PackStr(pk, "running");
  pk.pack(!p.done);
  PackStr(pk, "exit_code");
  PackOptInt(pk, p.done ? p.exit_code : std::nullopt);
  PackStr(pk, "signal");
  PackOptInt(pk, p.done ? p.signal : std::nullopt);
  return OpAnswer{std::nullopt, Str(buf)};
}

void Session::Output(const std::string& pid, std::optional<uint64_t> tail_lines, bool wait, uint64_t wait_timeout_ms,
                     AnswerDone done) {
  auto it = processes_.find(pid);
  if (it == processes_.end() || it->second->pid == 0) {
    done(OpAnswer::Error(ErrorCode::kNotFound, "no process " + pid + " in this session"));
    return;
  }
  Process& p = *it->second;
  if (!wait || p.done) {
    done(OutputOf(p, tail_lines));
    return;
  }
  // Waits until it ends or the wait times out; either way the answer is its output then.
  Process::Waiter w{p.next_waiter++, tail_lines, std::move(done), nullptr};
  struct Expiry {
    Process* p;
    uint64_t id;
  };
  auto* expiry = new Expiry{&p, w.id};
  w.timer = evtimer_new(base_, [](evutil_socket_t, short, void* arg) {
    std::unique_ptr<Expiry> e(static_cast<Expiry*>(arg));
    e->p->session->ProcessWaitExpired(*e->p, e->id);
  }, expiry);
  struct timeval tv = TimevalMs(static_cast<int64_t>(wait_timeout_ms));
  evtimer_add(w.timer, &tv);
  p.waiters.push_back(std::move(w));
}

void Session::ProcessWaitExpired(Process& p, uint64_t waiter) {
  for (auto it = p.waiters.begin(); it != p.waiters.end(); ++it) {
    if (it->id != waiter) continue;
    Process::Waiter w = std::move(*it);
    p.waiters.erase(it);
    event_free(w.timer);
    w.done(OutputOf(p, w.tail_lines));
    return;
  }
}

void Session::Stdin(const std::string& pid, const std::string& data, bool close, AnswerDone done) {
  auto it = processes_.find(pid);
  if (it == processes_.end() || it->second->pid == 0) {
    done(OpAnswer::Error(ErrorCode::kNotFound, "no process " + pid + " in this session"));
    return;
  }
  Process& p = *it->second;
  if (p.exited) {
    done(OpAnswer::Error(ErrorCode::kProcessExited, "process " + pid + " has exited"));
    return;
  }
  if (!p.io.stdin_open()) {
    done(OpAnswer::Error(ErrorCode::kBadField, "process " + pid + " has no stdin (closed, or started with stdin \"ignore\")"));
    return;
  }
  if (p.io.stdin_buffered() + data.size() > (16u << 20)) {
    done(OpAnswer::Error(ErrorCode::kTooLarge, "process " + pid + " is not reading its stdin (16 MiB waiting)"));
    return;
  }
  if (!data.empty()) p.io.WriteStdin(data);
  if (close) p.io.CloseStdin();
  done(OpAnswer{std::nullopt, "\x80"});
}

void Session::Kill(const std::string& pid, int signal, AnswerDone done) {
  auto it = processes_.find(pid);
  if (it == processes_.end() || it->second->pid == 0) {
    done(OpAnswer::Error(ErrorCode::kNotFound, "no process " + pid + " in this session"));
    return;
  }
  auto answer = [done = std::move(done)](bool killed) {
    msgpack::sbuffer buf;
    msgpack::packer<msgpack::sbuffer> pk(buf);
    pk.pack_map(1);
    PackStr(pk, "killed");
    pk.pack(killed);
    done(OpAnswer{std::nullopt, Str(buf)});
  };
  if (it->second->exited) {
    answer(false);
    return;
  }
  Signal(it->second->pid, signal, std::move(answer));
}

}  // namespace sandpool
