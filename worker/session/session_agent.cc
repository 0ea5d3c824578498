#include "worker/session/session_agent.h"

#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/heap.h"
#include "common/job_env.h"
#include "common/runtimes.h"
#include "worker/ipc/channel.h"
#include "worker/ipc/session_messages.h"
#include "worker/ipc/stub_protocol.h"
#include "worker/runners/session_shell_mother.h"
#include "worker/runners/zygote.h"
#include "worker/sandbox/rootfs.h"
#include "worker/sandbox/sandbox.h"
#include "worker/sandbox/sandbox_init.h"
#include "worker/seccomp/seccomp_policy.h"
#include "worker/session/session_files.h"

namespace sandpool {
namespace {

constexpr int kSock = 5;
// Shells started ahead of time for the session's user: a shell line runs in one at once (no
// exec on the way), and another is started behind it. Two while the session is idle; one more
// for each command running, up to eight, so that commands sent together (an agent's tools run
// in parallel) do not each pay an exec. An idle shell costs the session ~0.3 MiB.
constexpr size_t kWarmShells = 2;
constexpr size_t kMaxWarmShells = 8;

// Starting a shell blocks the process that starts it until the shell's exec (a vfork: ~0.5 ms
// here, the confinement and the exec's first half). In the agent's loop that was the time the
// end of the command just handed over, or the next one, waited. So a helper, the factory (a
// fork of the agent made once, before any session code exists), starts them: as the agent's
// children (CLONE_PARENT), so the agent reaps, signals and accounts them as before. The agent
// sends it a shell's five fds; it answers the pid, or -errno (a ShellFactoryReply). With the
// nursery library the factory becomes a shell mother (runners/session_shell_mother.h) and each
// shell is her clone, not an exec; without it (sanitizer builds, a session on an image root) it
// spawns and execs each. If it is gone (the session's code may kill it), the agent starts shells
// itself.

// A warm shell: `sh` with the session's environment, confined as uid 1000, waiting for the go on
// `ctl` (its fd 3) to source its script from `script` (its fd 4; zygote.h's SessionShellCommand).
struct WarmShell {
  pid_t pid = -1;
  UniqueFd ctl, script, stdin_w, stdout_r, stderr_r;
  bool ready = false;  // said 'R'
};

struct Proc {
  int64_t started_us = 0;
  UniqueFd ctl;         // a warm shell's fd 3: 'S' then EOF when the line started, or "E..."
  std::string said;
};

class Agent {
 public:
  Agent(const SandboxConfig& config, const SeccompProgram* seccomp, int nursery_lib)
      : config_(config), seccomp_(seccomp), nursery_lib_(LoaderVariablesFree(config.base_env) ? nursery_lib : -1) {
    shell_argv_ = SessionShellCommand();
    shell_env_ = config_.base_env;
    for (std::string& a : shell_argv_) shell_argv_ptrs_.push_back(a.data());
    shell_argv_ptrs_.push_back(nullptr);
    for (std::string& e : shell_env_) shell_env_ptrs_.push_back(e.data());
    mother_env_ptrs_ = shell_env_ptrs_;
    // The shell mother's: the loader preloads the library (her fd 4) and binds every symbol at
    // once, so that no shell binds a function the mother never called; she takes both out of her
    // environment before the shell reads it (nursery_lib.cc).
    mother_env_ptrs_.push_back(const_cast<char*>(kNurseryPreloadEnv));
    mother_env_ptrs_.push_back(const_cast<char*>(kNurseryBindNowEnv));
    shell_env_ptrs_.push_back(nullptr);
    mother_env_ptrs_.push_back(nullptr);
  }

  // A template's environment that sets the loader's variables itself keeps them for its shells,
  // which then are exec'd: the mother's would be ambiguous to the loader and to her.
  static bool LoaderVariablesFree(const std::vector<std::string>& env) {
    for (const std::string& e : env) {
      if (e.rfind("LD_PRELOAD=", 0) == 0 || e.rfind("LD_BIND_NOW=", 0) == 0) return false;
    }
    return true;
  }

  [[noreturn]] void Run() {
    // SIGCHLD comes through a signalfd, so the loop sees it with everything else.
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    ::sigprocmask(SIG_BLOCK, &chld, nullptr);
    sigfd_.reset(::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!sigfd_) ::_exit(3);
    StartFactory();
    if (::write(kSock, &kStubReady, 1) != 1) ::_exit(3);
    RefillShells();
    for (;;) {
      std::vector<struct pollfd> p = {{kSock, POLLIN, 0}, {sigfd_.get(), POLLIN, 0}, {factory_.fd(), POLLIN, 0}};
      // By pid, not by index: Reap and ShellSpoke remove entries while these are handled (a
      // session's `kill -9 -1` ends several warm shells at once).
      std::vector<pid_t> shell_of, proc_of;
      for (const WarmShell& w : warm_) {
        if (!w.ready) {
          p.push_back({w.ctl.get(), POLLIN, 0});
          shell_of.push_back(w.pid);
        }
      }
      for (auto& [pid, proc] : procs_) {
        if (proc.ctl) {
          p.push_back({proc.ctl.get(), POLLIN, 0});
          proc_of.push_back(pid);
        }
      }
      int timeout_ms = heap_held_ ? kTrimAfterIdleMs : -1;
      if (WaitingOnFactory()) {
        int left = static_cast<int>(std::max<int64_t>(0, kFactoryPatienceMs - (MonotonicUs() - factory_heard_us_) / 1000));
        timeout_ms = timeout_ms < 0 ? left : std::min(timeout_ms, left);
      }
      int ready = ::poll(p.data(), p.size(), timeout_ms);
      if (ready < 0 && errno != EINTR) ::_exit(3);
      if (WaitingOnFactory() && MonotonicUs() - factory_heard_us_ >= kFactoryPatienceMs * 1000) {
        // Stopped, or too slow to be of use (the session's code can signal it): the waiting lines
        // start here, and so do later shells.
        if (factory_pid_ > 0) ::kill(factory_pid_, SIGKILL);
        FactoryGone();
      }
      if (ready == 0) {
        // Idle since the last message: the buffers of its transfers go back to the kernel.
        ch_.ReleaseIdleBuffers();
        ::malloc_trim(0);
        heap_held_ = false;
        continue;
      }
      if (p[1].revents) Reap();
      if (p[2].revents) FactorySpoke();
      for (size_t k = 0; k < shell_of.size(); ++k) {
        if (p[3 + k].revents) ShellSpoke(shell_of[k]);
      }
      for (size_t k = 0; k < proc_of.size(); ++k) {
        if (p[3 + shell_of.size() + k].revents) ProcSpoke(proc_of[k]);
      }
      if (p[0].revents) {
        std::vector<Frame> frames;
        Status s = ch_.OnReadable(&frames);
        heap_held_ = true;
        for (Frame& f : frames) OnFrame(f);
        if (!s.ok()) ::_exit(0);  // the scheduler let go of this session
      }
      RunQueued();
      RefillShells();
    }
  }

 private:
  void Send(AgentMsg type, const std::string& payload, const std::vector<int>& fds = {}) {
    if (!ch_.Send(static_cast<uint16_t>(type), payload, fds).ok()) ::_exit(0);
  }

  // A Reply, its value (a file read: up to 16 MiB) sent from its own buffer.
  void SendReply(AgentReplyMsg r) {
    std::string value = std::move(r.value);
    r.value.clear();
    std::string head = EncodeMsgHead(r, value.size());
    if (!ch_.SendOwned(static_cast<uint16_t>(AgentMsg::kReply), head, std::move(value)).ok()) ::_exit(0);
  }

  void OnFrame(Frame& f) {
    switch (static_cast<AgentMsg>(f.type)) {
      case AgentMsg::kExec: {
        AgentExecMsg m;
        if (DecodeMsg(f.payload, &m).ok()) Exec(m);
        return;
      }
      case AgentMsg::kSignal: {
        AgentSignalMsg m;
        if (!DecodeMsg(f.payload, &m).ok()) return;
        AgentReplyMsg r;
        r.req = m.req;
        // The process's group: everything it started that did not leave it.
        bool ours = procs_.count(static_cast<pid_t>(m.pid)) > 0;
        if (!ours || m.pid <= 1 || m.signal < 0 || m.signal > 64 || ::kill(-static_cast<pid_t>(m.pid), m.signal) != 0) {
          r.error = "process_exited";
        }
        SendReply(std::move(r));
        return;
      }
      case AgentMsg::kFile: {
        AgentFileView m;  // views f.payload
        if (!DecodeMsg(f.payload, &m).ok()) return;
        AgentReplyMsg r = RunFileOperation(m.request);
        r.req = m.req;
        SendReply(std::move(r));
        return;
      }
      default:
        return;
    }
  }

  // Pipes for a process: [0] its stdin (read end for it), [1] stdout, [2] stderr.
  struct Stdio {
    UniqueFd in_r, in_w, out_r, out_w, err_r, err_w;
  };
  static Result<Stdio> MakeStdio(bool stdin_pipe) {
    Stdio s;
    auto out = MakePipe();
    auto err = MakePipe();
    if (!out.ok()) return out.status();
    if (!err.ok()) return err.status();
    s.out_r = std::move(out->read);
    s.out_w = std::move(out->write);
    s.err_r = std::move(err->read);
    s.err_w = std::move(err->write);
    if (stdin_pipe) {
      auto in = MakePipe();
      if (!in.ok()) return in.status();
      s.in_r = std::move(in->read);
      s.in_w = std::move(in->write);
    } else {
      s.in_r.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    }
    return s;
  }

  SandboxProcessSpec ShellSpec(const int (&fds)[5]) const {
    SandboxProcessSpec spec;
    spec.config = &config_;
    spec.seccomp = seccomp_;
    for (int i = 0; i < 5; ++i) spec.fds[i] = fds[i];
    spec.interp_argv = shell_argv_ptrs_.data();
    spec.interp_envp = shell_env_ptrs_.data();
    spec.interp_cwd = "/work";
    return spec;
  }

  // Forks the factory (see FactoryReply). Without it, shells are started in this loop.
  void StartFactory() {
    auto sock = MakeSocketPair(SOCK_STREAM);
    if (!sock.ok()) return;
    pid_t pid = ::fork();
    if (pid < 0) return;
    if (pid == 0) {
      if (nursery_lib_ >= 0) ExecShellMother(sock->b.get());
      // Nothing of the agent's but its socket to the agent: the scheduler's socket (fd 5) must
      // close when the agent ends, not when this does.
      // (Its blocked SIGCHLD does not matter: its shells are not its children, and each one
      // resets its signal mask in StubPrologue.)
      const int keep[] = {sock->b.get()};
      if (ArrangeFds(keep, 1) != 0) ::_exit(0);
      FactoryMain(Channel(UniqueFd(3)));
    }
    factory_pid_ = pid;
    factory_ = Channel(std::move(sock->a));
  }

  // The factory as a shell mother: confined once as each shell would be (StubPrologue: its own
  // session, uid 1000, no_new_privs, rlimits, default signals, then the job's filter), fd 3 the
  // socket to the agent and fd 4 the library, it execs the session's shell with the library
  // preloaded. A failure ends it, and the agent starts its shells itself (FactoryGone).
  [[noreturn]] void ExecShellMother(int sock) {
    // The library at 3 while confining: a failure StubPrologue reports on fd 3 goes nowhere
    // rather than into the agent's channel.
    const int keep[] = {nursery_lib_, sock};
    if (ArrangeFds(keep, 2) != 0) ::_exit(0);
    if (seccomp_ == nullptr || LoadSeccompProgram(*seccomp_) != 0) ::_exit(0);
    StubPrologue(config_, nullptr);
    if (::dup3(3, 5, 0) != 5 || ::dup3(4, 3, 0) != 3 || ::dup3(5, 4, 0) != 4 || ::close(5) != 0) ::_exit(0);
    if (::chdir("/work") != 0) ::_exit(0);
    ::execve(shell_argv_ptrs_[0], shell_argv_ptrs_.data(), mother_env_ptrs_.data());
    ::_exit(0);
  }

  [[noreturn]] void FactoryMain(Channel ch) {
    // The job filter, once, on itself: every shell it starts inherits it instead of compiling
    // its own (measured: with 8 commands in flight, 5% of all the machine's CPU went to those
    // compilations). The filter allows what a start needs (a clone without new namespaces,
    // dropping privileges).
    bool filtered = seccomp_ != nullptr && LoadSeccompProgram(*seccomp_) == 0;
    for (;;) {
      auto f = ch.Receive();
      if (!f.ok()) ::_exit(0);  // the agent is gone
      ShellFactoryReply r{-EINVAL};
      if (f->fds.size() == 5) {
        int fds[5];
        for (int i = 0; i < 5; ++i) fds[i] = f->fds[i].get();
        SandboxProcessSpec spec = ShellSpec(fds);
        spec.as_sibling = true;
        if (filtered) spec.seccomp = nullptr;  // inherited
        pid_t pid = SpawnSandboxProcess(spec);
        r.pid = pid > 0 ? pid : -errno;
      }
      f->fds.clear();  // closed before the answer: the agent's ends see EOF if the shell dies
      if (!ch.Send(0, std::string_view(reinterpret_cast<const char*>(&r), sizeof r)).ok()) ::_exit(0);
    }
  }

  // Lines wait for shells the factory was asked for.
  bool WaitingOnFactory() const { return factory_.valid() && !queued_.empty(); }

  void FactoryGone() {
    factory_.Close();
    // Shells it may or may not have started: without a pid they cannot be used. Dropping their
    // ends makes any that exists read EOF, source an empty script and exit (reaped quietly).
    pending_.clear();
    while (!queued_.empty()) ShellFailed();
  }

  void FactorySpoke() {
    std::vector<Frame> frames;
    Status s = factory_.OnReadable(&frames);
    if (!frames.empty()) factory_heard_us_ = MonotonicUs();
    for (Frame& f : frames) {
      if (pending_.empty()) break;
      WarmShell w = std::move(pending_.front());
      pending_.pop_front();
      ShellFactoryReply r{-EIO};
      if (f.payload.size() == sizeof r) std::memcpy(&r, f.payload.data(), sizeof r);
      if (r.pid <= 0 || early_exits_.erase(r.pid) != 0) {  // not started, or already dead
        ShellFailed();
        continue;
      }
      AddShell(r.pid, std::move(w));
    }
    if (!s.ok()) FactoryGone();
    if (pending_.empty()) early_exits_.clear();
  }

  void AddShell(pid_t pid, WarmShell w) {
    w.pid = pid;
    procs_[pid] = Proc{};  // reaped like any process of the session (not reported until used)
    warm_.push_back(std::move(w));
  }

  void StartShell() {
    auto io = MakeStdio(true);
    auto sock = MakeSocketPair(SOCK_STREAM);
    UniqueFd script(::memfd_create("sandpool-shell-script", MFD_CLOEXEC));
    if (!io.ok() || !sock.ok() || !script) return;
    int fds[5] = {io->in_r.get(), io->out_w.get(), io->err_w.get(), sock->b.get(), script.get()};
    WarmShell w;
    w.ctl = std::move(sock->a);
    w.script = std::move(script);
    w.stdin_w = std::move(io->in_w);
    w.stdout_r = std::move(io->out_r);
    w.stderr_r = std::move(io->err_r);
    if (factory_.valid()) {
      std::vector<int> v(fds, fds + 5);
      if (factory_.Send(0, "S", v).ok()) {
        pending_.push_back(std::move(w));
        return;
      }
      FactoryGone();
    }
    pid_t pid = SpawnSandboxProcess(ShellSpec(fds));
    if (pid < 0) return;
    AddShell(pid, std::move(w));
  }

  void RefillShells() {
    size_t running = 0;
    for (const auto& [pid, proc] : procs_) running += proc.started_us != 0;
    size_t want = std::min(kMaxWarmShells, kWarmShells + running + queued_.size());
    size_t tries = 0;
    while (warm_.size() + pending_.size() < want && tries++ < kMaxWarmShells) StartShell();
  }

  void ShellSpoke(pid_t pid) {
    size_t i = 0;
    while (i < warm_.size() && warm_[i].pid != pid) ++i;
    if (i == warm_.size()) return;  // reaped meanwhile
    char c = 0;
    ssize_t n = ::read(warm_[i].ctl.get(), &c, 1);
    if (n == 1 && c == kStubReady) {
      warm_[i].ready = true;
      return;
    }
    // It died or could not start: forget it (its exit is reaped, not reported).
    ::kill(warm_[i].pid, SIGKILL);
    warm_.erase(warm_.begin() + static_cast<long>(i));
    ShellFailed();
  }

  void ProcSpoke(pid_t pid) {
    auto it = procs_.find(pid);
    if (it == procs_.end() || !it->second.ctl) return;  // reaped meanwhile
    Proc& p = it->second;
    char buf[128];
    ssize_t n = ::read(p.ctl.get(), buf, sizeof buf);
    if (n > 0 && p.said.size() < 256) p.said.append(buf, static_cast<size_t>(n));
    if (n <= 0) p.ctl.reset();
  }

  // Whether a child has not ended yet (not reaped: its end is left for Reap to see). Session code
  // may have killed a warm shell (`kill -9 -1`) a moment before a line is given to it.
  static bool Alive(pid_t pid) {
    siginfo_t si = {};
    return ::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == 0;
  }

  // A shell line for the session's user runs in a warm shell.
  static bool ForWarmShell(const AgentExecMsg& m) { return !m.shell.empty() && !m.as_root && m.stdin_pipe; }

  // Starts the process of an Exec; answers Started (with the host ends of its stdio) or the reason.
  // A shell line waits for a warm shell when none is ready and the factory is starting them (a
  // start here would block this loop for the time the factory takes anyway).
  void Exec(const AgentExecMsg& m) {
    if (ForWarmShell(m)) {
      if (RunInWarmShell(m)) return;
      if (factory_.valid()) {
        if (queued_.empty()) factory_heard_us_ = MonotonicUs();
        queued_.push_back(m);
        return;
      }
    }
    ExecHere(m);
  }

  // Gives `m` to a ready warm shell, if there is one.
  bool RunInWarmShell(const AgentExecMsg& m) {
    for (size_t i = 0; i < warm_.size();) {
      if (!warm_[i].ready || !Alive(warm_[i].pid)) {  // a dead one is reaped and replaced
        ++i;
        continue;
      }
      WarmShell w = std::move(warm_[i]);
      warm_.erase(warm_.begin() + static_cast<long>(i));
      RunMsg run;
      run.kind = "shell";
      run.code = m.shell;
      run.env = m.env;
      run.cwd = m.cwd;
      // The shell sources it and closes fd 4 before it runs the line (zygote.cc, kSessionShell).
      std::string script = ZygotePayload(*FindRuntime("sh"), run);
      if (!WriteAll(w.script.get(), script.data(), script.size()).ok() || ::shutdown(w.ctl.get(), SHUT_WR) != 0) {
        ::kill(w.pid, SIGKILL);
        continue;
      }
      Proc& p = procs_[w.pid];
      p.started_us = MonotonicUs();
      p.ctl = std::move(w.ctl);
      AgentStartedMsg started;
      started.req = m.req;
      started.pid = w.pid;
      Send(AgentMsg::kStarted, EncodeMsg(started), {w.stdin_w.get(), w.stdout_r.get(), w.stderr_r.get()});
      return true;
    }
    return false;
  }

  void RunQueued() {
    while (!queued_.empty() && RunInWarmShell(queued_.front())) queued_.pop_front();
  }

  // A shell that was to come did not (the factory failed, or it died before it was ready): the
  // oldest waiting line is started here, so that none waits on shells that never come.
  void ShellFailed() {
    if (queued_.empty()) return;
    AgentExecMsg m = std::move(queued_.front());
    queued_.pop_front();
    ExecHere(m);
  }

  void ExecHere(const AgentExecMsg& m) {
    AgentStartedMsg started;
    started.req = m.req;
    auto io = MakeStdio(m.stdin_pipe);
    auto report = MakePipe();
    if (!io.ok() || !report.ok()) {
      started.error = EMFILE;
      started.stage = "pipes";
      Send(AgentMsg::kStarted, EncodeMsg(started));
      return;
    }
    // The exec image, in this process's memory (the child shares it until its exec).
    RunMsg run;
    run.argv = m.shell.empty() ? m.argv : SourceArgv(*FindRuntime("sh"), m.shell);
    run.env = m.env;
    run.cwd = m.cwd;
    std::string framed = EncodeExecImage(run, DefaultPath());
    std::string body = framed.substr(sizeof(uint32_t));
    std::vector<char*> ptrs(run.argv.size() + run.env.size() + 3);
    ExecImage image;
    if (run.argv.empty() || !MapExecImage(body.data(), body.size(), ptrs.data(), ptrs.size(), &image)) {
      started.error = EINVAL;
      started.stage = "exec";
      Send(AgentMsg::kStarted, EncodeMsg(started));
      return;
    }
    SandboxProcessSpec spec;
    spec.config = &config_;
    spec.seccomp = seccomp_;
    spec.fds[0] = io->in_r.get();
    spec.fds[1] = io->out_w.get();
    spec.fds[2] = io->err_w.get();
    spec.fds[3] = report->write.get();
    spec.as_root = m.as_root;
    spec.image = &image;
    int64_t t0 = MonotonicUs();
    pid_t pid = SpawnSandboxProcess(spec);
    if (pid < 0) {
      started.error = errno;
      started.stage = "fork";
      Send(AgentMsg::kStarted, EncodeMsg(started));
      return;
    }
    // The child has exec'd (its end of the report pipe closed with it) or failed and said why.
    report->write.reset();
    std::string said = ReadReportToEof(report->read.get());
    StubReport r = ParseStubReport(said);
    if (r.failed()) {
      started.error = r.error;
      started.stage = r.stage;
      procs_[pid] = Proc{};  // reaped quietly
      Send(AgentMsg::kStarted, EncodeMsg(started));
      return;
    }
    Proc& p = procs_[pid];
    p.started_us = t0;
    started.pid = pid;
    std::vector<int> fds = {io->in_w ? io->in_w.get() : -1, io->out_r.get(), io->err_r.get()};
    if (!io->in_w) {
      // No stdin pipe: the scheduler gets an end that is already closed for writing.
      auto dummy = MakePipe();
      if (dummy.ok()) {
        io->in_w = std::move(dummy->write);
        fds[0] = io->in_w.get();
      }
    }
    Send(AgentMsg::kStarted, EncodeMsg(started), fds);
  }

  void Reap() {
    struct signalfd_siginfo si;
    while (::read(sigfd_.get(), &si, sizeof si) > 0) {
    }
    for (;;) {
      int status = 0;
      struct rusage ru = {};
      pid_t pid = ::wait4(-1, &status, WNOHANG | __WALL, &ru);
      if (pid <= 0) return;
      if (pid == factory_pid_) {
        factory_pid_ = -1;
        FactoryGone();
        continue;
      }
      auto it = procs_.find(pid);
      if (it == procs_.end()) {
        // An orphan the session left: reaped, nothing to say. Or a shell the factory started
        // whose pid it has not told yet.
        if (!pending_.empty()) early_exits_.insert(pid);
        continue;
      }
      // A warm shell that died before it was used is just replaced.
      bool idle = false;
      for (size_t i = 0; i < warm_.size(); ++i) {
        if (warm_[i].pid == pid) {
          warm_.erase(warm_.begin() + static_cast<long>(i));
          idle = true;
          break;
        }
      }
      Proc p = std::move(it->second);
      procs_.erase(it);
      if (idle || p.started_us == 0) continue;
      if (p.ctl) p.said += DrainStatus(p.ctl.get());
      AgentExitedMsg ex;
      ex.pid = pid;
      ex.wait_status = status;
      StubReport r = ParseStubReport(p.said);
      if (r.failed()) {
        ex.error = r.error;
        ex.stage = r.stage;
      }
      ex.cpu_time_us = static_cast<uint64_t>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
                       static_cast<uint64_t>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
      ex.peak_memory_bytes = static_cast<uint64_t>(ru.ru_maxrss) * 1024;
      ex.run_us = static_cast<uint64_t>(MonotonicUs() - p.started_us);
      Send(AgentMsg::kExited, EncodeMsg(ex));
    }
  }

  const SandboxConfig& config_;
  const SeccompProgram* seccomp_;
  const int nursery_lib_;  // its fd, or -1: the factory spawns each shell (FactoryMain)
  Channel ch_{UniqueFd(kSock)};
  UniqueFd sigfd_;
  // Messages came since the heap was last trimmed (KeepLargeBuffersInHeap: their buffers stay
  // in the heap until the agent has been idle this long).
  static constexpr int kTrimAfterIdleMs = 1000;
  bool heap_held_ = false;
  std::map<pid_t, Proc> procs_;
  std::deque<WarmShell> warm_;
  Channel factory_;
  pid_t factory_pid_ = -1;
  // When the factory last answered, or a line began to wait for it: a factory silent this long
  // while lines wait is given up (Run).
  int64_t factory_heard_us_ = 0;
  static constexpr int64_t kFactoryPatienceMs = 3000;
  std::deque<WarmShell> pending_;  // sent to the factory, its pid not yet answered (in order)
  std::set<pid_t> early_exits_;    // reaped while their pid may be among those answers
  std::deque<AgentExecMsg> queued_;  // shell lines waiting for a warm shell to be ready
  std::vector<std::string> shell_argv_, shell_env_;
  std::vector<char*> shell_argv_ptrs_, shell_env_ptrs_, mother_env_ptrs_;
};

}  // namespace

void SessionAgentMain(const SandboxConfig& config, const SeccompProgram* seccomp, int nursery_lib) {
  // init keeps none of the host's stdio (the keeper's) and none of the unused job pipes.
  int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd = 0; fd < 3; ++fd) ::dup2(devnull, fd);
  for (int fd = 6; fd <= 8; ++fd) ::close(fd);
  ::close(devnull);
  // A file operation copies its bytes a few times (frame, request, reply): kept in the heap
  // (common/heap.h) while operations follow each other. The session's cgroup is charged for that
  // memory, so the loop gives it back once the agent has been idle for kTrimAfterIdleMs
  // (Agent::Run).
  KeepLargeBuffersInHeap();
  static Agent agent(config, seccomp, nursery_lib);
  agent.Run();
}

void SessionInitMain(const SandboxConfig& config, const SeccompProgram* seccomp, bool fresh, int nursery_lib) {
  InitSetUp(config, fresh ? +[](const SandboxConfig& c) { return MountSessionFilesystems(c, true); }
                          : +[](const SandboxConfig& c) { return MountSessionFilesystems(c, false); });
  SessionAgentMain(config, seccomp, nursery_lib);
}

}  // namespace sandpool
