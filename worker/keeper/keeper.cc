#include "worker/keeper/keeper.h"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <grp.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "common/clock.h"
#include "common/job_env.h"
#include "common/log.h"
#include "common/syscalls.h"
#include "worker/ipc/channel.h"
#include "worker/ipc/messages.h"
#include "worker/ipc/stub_protocol.h"
#include "worker/runners/nursery.h"
#include "worker/runners/nursery_mother.h"
#include "worker/runners/nursery_wire.h"
#include "worker/runners/zygote.h"
#include "worker/sandbox/conntrack_flush.h"
#include "worker/sandbox/netns_setup.h"
#include "worker/sandbox/rootfs.h"
#include "worker/sandbox/sandbox.h"
#include "worker/seccomp/seccomp_policy.h"
#include "worker/session/session_keeper.h"

namespace sandpool {
namespace {

// One-time set-up of the keeper process itself, of either kind.
Status SetUpKeeper(const KeeperArgs& a, SlotCgroup* cgroup, UniqueFd* loop_control) {
  // The host root's supplementary groups would otherwise follow every sandbox process into its
  // user namespace and keep granting group access to host files.
  if (::setgroups(0, nullptr) != 0) return ErrnoStatus("setgroups");
  auto cg = SlotCgroup::Create(a.layout, a.slot, a.config.cgroup);
  if (!cg.ok()) return cg.status().Prefixed("slot cgroup");
  *cgroup = std::move(cg.value());
  // A network template's slot gets its link to the host (netns_setup.h); the netlink socket
  // for the host end is opened while this process is still in the host's namespace.
  std::optional<HostNetlink> host_netlink;
  if (a.config.network.enabled) {
    auto h = HostNetlink::Open();
    if (!h.ok()) return h.status().Prefixed("slot network");
    host_netlink.emplace(std::move(h.value()));
    // Flows an earlier user of this slot number left (another template's job, another session)
    // are not this slot's to use.
    SP_RETURN_IF_ERROR(FlushConntrackFrom(SandboxAddress(a.config.network, a.slot)).Prefixed("slot network"));
  }
  SP_RETURN_IF_ERROR(EnterNewNetworkNamespace());
  if (host_netlink) SP_RETURN_IF_ERROR(host_netlink->ConnectSlot(a.config.network, a.slot).Prefixed("slot network"));
  if (::unshare(CLONE_NEWNS) != 0) return ErrnoStatus("unshare(CLONE_NEWNS)");
  return BuildKeeperRoot(a.config, a.slot, a.session, loop_control).Prefixed("sandbox root");
}

class Keeper {
 public:
  // `nursery_seccomp`: the mothers' filters, given exactly when the slot's sandboxes come from a
  // mother (KeeperMain decides: with `nursery_lib`).
  Keeper(const KeeperArgs& a, Channel channel, SlotCgroup cgroup, SeccompProgram seccomp, UniqueFd nursery_lib,
         std::optional<NurserySeccomp> nursery_seccomp)
      : a_(a), ch_(std::move(channel)), cgroup_(std::move(cgroup)), seccomp_(std::move(seccomp)),
        nursery_lib_(std::move(nursery_lib)) {
    runtime_ = TemplateRuntime(a.config.runtime);
    if (runtime_ != nullptr) stub_command_ = ZygoteCommand(*runtime_);
    if (nursery_lib_) stub_command_ = NurseryMotherCommand(*runtime_);
    nursery_ = nursery_seccomp.has_value();
    if (nursery_) {
      nursery_seccomp_ = std::move(*nursery_seccomp);
      // Each mother's sandboxes load the job's filter over hers (seccomp_policy.h).
      nursery_config_ = EncodeNurseryConfig(a.config, nursery_seccomp_.job);
    }
  }

  [[noreturn]] void Run() {
    int backoff_ms = 50;
    for (;;) {
      int64_t t0 = MonotonicUs();
      auto sb = Prepare();
      if (!sb.ok()) {
        LogWarn("sandbox preparation failed", {{"slot", a_.slot}, {"error", sb.status().message()}});
        Send(MsgType::kFailed, Encode(FailedMsg{sb.status().message()}));
        WaitOrExit(backoff_ms);
        backoff_ms = std::min(backoff_ms * 2, 5000);
        continue;
      }
      backoff_ms = 50;
      sb_ = std::move(sb.value());
      ReadyMsg ready{gen_, static_cast<uint64_t>(MonotonicUs() - t0)};
      Send(MsgType::kReady, Encode(ready), {sb_.stdin_w.get(), sb_.stdout_r.get(), sb_.stderr_r.get()});
      sb_.stdin_w.reset();
      sb_.stdout_r.reset();
      sb_.stderr_r.reset();
      Serve();
    }
  }

 private:
  // The next sandbox, in a cgroup of its own: cloned by the keeper, or by the slot's nursery
  // mother (started first if it is not running: the cold path, after start-up only when a
  // mother died).
  Result<Sandbox> Prepare() {
    ++gen_;
    // The last sandbox's cgroup, reset (SandboxCgroup::Recycle), or a new one.
    Result<SandboxCgroup> cg = spare_cgroup_.valid() ? Result<SandboxCgroup>(std::move(spare_cgroup_))
                                                     : cgroup_.NewSandbox("sb-" + std::to_string(gen_));
    spare_cgroup_ = SandboxCgroup();
    if (!cg.ok()) return cg.status().Prefixed("sandbox cgroup");
    if (!nursery_) {
      return PrepareSandbox(a_.config, a_.slot, std::move(cg.value()), &seccomp_, stub_command_);
    }
    if (!MotherAlive()) {
      auto mcg = cgroup_.NewSandbox("mother-" + std::to_string(gen_));
      if (!mcg.ok()) return mcg.status().Prefixed("nursery mother cgroup");
      const SeccompProgram* filter = &nursery_seccomp_.mother;
      auto m = PrepareSandbox(a_.config, a_.slot, std::move(mcg.value()), filter, stub_command_, nursery_lib_.get());
      if (!m.ok()) return m.status().Prefixed("nursery mother");
      mother_ = std::move(m.value());
      mother_.stdin_w.reset();
      Status s = SendNurseryConfig(mother_.stub.get(), nursery_config_);
      if (!s.ok()) {
        // Part of it may be in her socket: she would take what comes next for the rest.
        EndMother();
        return s;
      }
    }
    auto sb = NurseryPrepareSandbox(mother_.stub.get(), std::move(cg.value()));
    if (!sb.ok()) {
      if (!MotherAlive()) return sb.status().Prefixed("the nursery mother died: " + MotherOutput());
      // A mother that could not make a sandbox (wedged, or out of step on its socket) is not
      // asked again: the next attempt starts a new one.
      EndMother();
    }
    return sb;
  }

  // Whether the nursery mother runs; reaps it (it is our child) when it does not.
  bool MotherAlive() {
    if (!mother_.pidfd) return false;
    struct pollfd p = {mother_.pidfd.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) == 0) return true;
    siginfo_t info;
    ::waitid(P_PIDFD, static_cast<id_t>(mother_.pidfd.get()), &info, WEXITED);
    return false;
  }

  void EndMother() {
    KillSandbox(mother_);
    if (mother_.pidfd) {
      struct pollfd p = {mother_.pidfd.get(), POLLIN, 0};
      ::poll(&p, 1, 2000);
      siginfo_t info;
      ::waitid(P_PIDFD, static_cast<id_t>(mother_.pidfd.get()), &info, WEXITED);
    }
    (void)mother_.cgroup.Remove();
    mother_ = Sandbox();
  }

  // What a dead mother left on its stdout and stderr, for the log.
  std::string MotherOutput() {
    std::string out = DrainStatus(mother_.stderr_r.get()) + DrainStatus(mother_.stdout_r.get());
    std::string init = InitFailure(DrainStatus(mother_.status.get()));
    if (!init.empty()) out += " init: " + init;
    (void)mother_.cgroup.Remove();
    mother_ = Sandbox();
    return out.size() > 2000 ? out.substr(out.size() - 2000) : out;
  }

  // Kills the sandbox: init through its pidfd (the pid namespace then takes every process with
  // it) and, on cgroup v2, everything in its cgroup at once with cgroup.kill as well.
  void Kill() {
    KillSandbox(sb_);
    (void)sb_.cgroup.KillAll();
  }

  void Send(MsgType t, const std::string& payload, const std::vector<int>& fds = {}) {
    Status s = ch_.Send(static_cast<uint16_t>(t), payload, fds);
    if (!s.ok()) Exit("scheduler channel: " + s.message());
  }

  [[noreturn]] void Exit(const std::string& why) {
    LogDebug("keeper exiting", {{"slot", a_.slot}, {"why", why}});
    Kill();
    if (sb_.pidfd) {
      // Gone once its pidfd says so (a nursery's init is not our child: waitid cannot wait).
      struct pollfd p = {sb_.pidfd.get(), POLLIN, 0};
      ::poll(&p, 1, 2000);
      siginfo_t info;
      ::waitid(P_PIDFD, static_cast<id_t>(sb_.pidfd.get()), &info, WEXITED);
    }
    (void)sb_.cgroup.Remove();
    (void)spare_cgroup_.Remove();
    EndMother();
    ::_exit(0);
  }

  // Sleeps, but leaves at once if the scheduler goes away.
  void WaitOrExit(int ms) {
    struct pollfd p = {ch_.fd(), POLLIN, 0};
    if (::poll(&p, 1, ms) > 0) (void)ReadFrames();  // nothing is expected but the channel's end
  }

  // The frames that arrived (a partly received frame waits for its rest); leaves if the
  // scheduler went away.
  std::vector<Frame> ReadFrames() {
    std::vector<Frame> frames;
    Status s = ch_.OnReadable(&frames);
    if (!s.ok()) Exit("scheduler channel: " + s.message());
    return frames;
  }

  // The state of the current sandbox's job while Serve runs.
  struct Job {
    bool run_sent = false, started = false, killed = false, cpu_limit = false, memory_limit = false;
    int64_t exec_at = 0, exec_end = 0;
    uint64_t cpu_limit_us = 0;
    uint64_t memory_limit_bytes = 0;  // watched on v1 (socket buffers are charged apart there)
    std::string stub_said;  // what the stub or zygote wrote back after the job was sent
    std::string to_stub;    // the job's bytes not yet taken by the stub (its socket or script pipe)
    size_t to_stub_off = 0;
    StubReport failure;     // a stub's "E<errno> <stage>", or a limit that could not be set
    CgroupStats base{};
    // init's report: 'S' + InitReport once the job's main process has ended, written just
    // before init exits. The job's end is reported on it, not on init's death, which comes
    // later (init's own teardown, the pid and mount namespaces'): nothing of the job is left
    // to run by then, and its output is complete when the pipes reach EOF, which the scheduler
    // waits for anyway. The slot is prepared again only once init is gone.
    std::string report;
    bool status_open = true, have_report = false;
  };

  // The stub socket's EOF after 'S': the exec happened (close-on-exec) or the zygote started the
  // job, unless an error report came; EOF without 'S': the stub died before the job started.
  void OnStubEof(Job& j) {
    StubReport said = ParseStubReport(j.stub_said);
    if (said.failed()) {
      j.failure = said;
    } else if (said.starting && !j.started) {
      j.started = true;
      j.exec_at = MonotonicUs();
      Send(MsgType::kStarted, Encode(GenerationMsg{gen_}));
    }
    sb_.stub.reset();
    j.run_sent = false;
    j.to_stub.clear();  // all taken: a shell reads its whole script before it says 'S'
  }

  // A Run for this sandbox: its limits first (a job never runs under limits other than its
  // own: if they cannot be set the sandbox is killed instead), then the job to the stub.
  void OnRun(Job& j, const RunMsg& run) {
    Status s = sb_.cgroup.SetLimits(run.memory_bytes, run.pids);
    if (!s.ok()) {
      LogWarn("cannot set the job's limits; not running it", {{"slot", a_.slot}, {"error", s.message()}});
      j.failure.error = s.sys_errno() != 0 ? s.sys_errno() : EIO;
      j.failure.stage = "limits";
      j.killed = true;
      Kill();
      return;
    }
    if (auto st = sb_.cgroup.Read(); st.ok()) j.base = *st;
    j.cpu_limit_us = run.cpu_time_ms * 1000;
    if (cgroup_.mode() == CgroupMode::kV1) j.memory_limit_bytes = sb_.cgroup.memory_limit();
    // The stub (or zygote) is blocked reading; the job goes to it as the socket takes it
    // (POLLOUT in Serve), so a large job never blocks this loop.
    j.to_stub = runtime_ == nullptr ? EncodeExecImage(run, DefaultPath()) : ZygotePayload(*runtime_, run);
    j.to_stub_off = 0;
    j.run_sent = true;
  }

  // The job's bytes go to a shell zygote's script pipe (non-blocking, FinishSandbox), else to the
  // stub socket; either way the reader takes them to EOF, which follows them.
  void WriteToStub(Job& j) {
    const bool pipe = static_cast<bool>(sb_.script);
    while (j.to_stub_off < j.to_stub.size()) {
      const char* data = j.to_stub.data() + j.to_stub_off;
      size_t len = j.to_stub.size() - j.to_stub_off;
      ssize_t w = pipe ? ::write(sb_.script.get(), data, len)
                       : ::send(sb_.stub.get(), data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno == EAGAIN) return;
      // The stub died (EPIPE): the rest is dropped; its end shows on the pidfd.
      j.to_stub_off = w < 0 ? j.to_stub.size() : j.to_stub_off + static_cast<size_t>(w);
    }
    j.to_stub.clear();
    j.to_stub_off = 0;
    if (pipe) {
      sb_.script.reset();
    } else if (runtime_ != nullptr) {
      ::shutdown(sb_.stub.get(), SHUT_WR);
    }
  }

  // While the job runs: its CPU time (the whole cgroup: every process of the job) and, on cgroup
  // v1, its memory with socket buffers (v1 only puts sockets under pressure at the limit).
  void WatchLimits(Job& j) {
    if (!j.started || j.killed) return;
    if (j.cpu_limit_us > 0) {
      auto st = sb_.cgroup.Read();
      if (st.ok() && st->cpu_usage_us - j.base.cpu_usage_us > j.cpu_limit_us) {
        j.cpu_limit = j.killed = true;
        Kill();
        return;
      }
    }
    if (j.memory_limit_bytes > 0) {
      auto used = sb_.cgroup.MemoryInUse();
      if (used.ok() && *used > j.memory_limit_bytes) {
        j.memory_limit = j.killed = true;
        Kill();
      }
    }
  }

  // Serves the current sandbox until it is gone, then reports Exited.
  void Serve() {
    Job j;
    for (;;) {
      const bool to_write = !j.to_stub.empty();
      short stub_events = static_cast<short>(to_write && !sb_.script ? POLLIN | POLLOUT : POLLIN);
      struct pollfd p[5] = {{ch_.fd(), POLLIN, 0},
                            {sb_.pidfd.get(), POLLIN, 0},
                            {j.run_sent ? sb_.stub.get() : -1, stub_events, 0},
                            {j.status_open ? sb_.status.get() : -1, POLLIN, 0},
                            {to_write && sb_.script ? sb_.script.get() : -1, POLLOUT, 0}};
      bool watching = j.started && (j.cpu_limit_us > 0 || j.memory_limit_bytes > 0);
      int n = ::poll(p, 5, watching ? kWatchMs : -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        Exit("poll: " + std::string(std::strerror(errno)));
      }
      WatchLimits(j);
      if (p[0].revents) {
        for (Frame& f : ReadFrames()) {
          if (f.type == static_cast<uint16_t>(MsgType::kRun) && !j.run_sent && !j.killed && !j.failure.failed()) {
            RunMsg run;
            if (Decode(f.payload, &run).ok() && run.generation == gen_) OnRun(j, run);
          } else if (f.type == static_cast<uint16_t>(MsgType::kKill)) {
            GenerationMsg k;
            if (Decode(f.payload, &k).ok() && k.generation == gen_ && !j.killed) {
              j.killed = true;
              Kill();
            }
          }
        }
      }
      if ((p[2].revents & POLLOUT) || p[4].revents) WriteToStub(j);
      if (p[2].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[128];
        ssize_t r = ::read(sb_.stub.get(), buf, sizeof buf);
        if (r > 0 && j.stub_said.size() < 256) j.stub_said.append(buf, static_cast<size_t>(r));
        if (r <= 0) OnStubEof(j);
      }
      if (p[3].revents) {
        char buf[64];
        ssize_t r = ::read(sb_.status.get(), buf, sizeof buf);
        if (r > 0) j.report.append(buf, static_cast<size_t>(r));
        if (r <= 0) j.status_open = false;  // init died without a report: its pidfd tells
        InitReport ir;
        if (DecodeInitReport(j.report, &ir)) {
          j.exec_end = MonotonicUs();
          // Every process of the job is gone (init reaped them all), so is every holder of the
          // stub socket's other end: take what was said, then its EOF.
          if (sb_.stub) {
            j.stub_said += DrainStatus(sb_.stub.get());
            if (j.stub_said.size() > 256) j.stub_said.resize(256);
            OnStubEof(j);
          }
          j.have_report = true;
          break;
        }
      }
      if (p[1].revents) {
        j.exec_end = MonotonicUs();
        siginfo_t info = {};
        ::waitid(P_PIDFD, static_cast<id_t>(sb_.pidfd.get()), &info, WEXITED);
        break;
      }
    }
    ExitedMsg ex;
    ex.generation = gen_;
    ex.started = j.started;
    ex.killed = j.killed;
    ex.cpu_limit = j.cpu_limit;
    ex.memory_limit = j.memory_limit;
    if (j.failure.failed()) {
      ex.exec_errno = j.failure.error;
      ex.exec_stage = j.failure.stage;
    }
    if (!j.have_report) j.report += DrainStatus(sb_.status.get());
    if (InitReport ir; DecodeInitReport(j.report, &ir)) {
      ex.have_status = true;
      ex.wait_status = ir.wait_status;
      ex.disk_full = ir.disk_full != 0;
    }
    if (auto st = sb_.cgroup.Read(); st.ok()) {
      ex.cpu_time_us = st->cpu_usage_us - j.base.cpu_usage_us;
      ex.peak_memory_bytes = st->peak_memory_bytes;
      ex.oom_kills = st->oom_kills - j.base.oom_kills;
      ex.pids_max_hits = st->pids_max_hits - j.base.pids_max_hits;
    }
    if (j.started && j.exec_end >= j.exec_at) ex.exec_time_us = static_cast<uint64_t>(j.exec_end - j.exec_at);
    UniqueFd init = std::move(sb_.pidfd);
    SandboxCgroup cgroup = std::move(sb_.cgroup);
    sb_ = Sandbox();
    Send(MsgType::kExited, Encode(ex));
    if (j.have_report) AwaitDeath(init.get());
    KeepCgroup(std::move(cgroup));
  }

  // The slot's next sandbox runs in this cgroup if it can be reset for it; otherwise it is
  // removed (the kernel moves what is still charged to it to the slot) and the next gets a new one.
  void KeepCgroup(SandboxCgroup cgroup) {
    Status reset = cgroup.Recycle(kMaxLeftoverBytes);
    if (reset.ok()) {
      spare_cgroup_ = std::move(cgroup);
      return;
    }
    LogDebug("sandbox cgroup not reused", {{"slot", a_.slot}, {"why", reset.message()}});
    Status removed = cgroup.Remove();
    if (!removed.ok()) LogWarn("sandbox cgroup not removed", {{"slot", a_.slot}, {"error", removed.message()}});
  }

  // init reported and is exiting; the next sandbox waits until it is gone (its cgroup empty,
  // every process of the job dead). One that does not go within 10 s is killed.
  void AwaitDeath(int pidfd) {
    struct pollfd p = {pidfd, POLLIN, 0};
    while (::poll(&p, 1, 10000) < 0 && errno == EINTR) {
    }
    if (!(p.revents & POLLIN)) {
      sys::PidfdSendSignal(pidfd, SIGKILL);
      ::poll(&p, 1, 10000);
    }
    siginfo_t info;
    ::waitid(P_PIDFD, static_cast<id_t>(pidfd), &info, WEXITED);  // ECHILD for a nursery's
  }

  static constexpr int kWatchMs = 20;  // how often the limits the keeper enforces are read
  // What a sandbox cgroup may still have charged (kernel caches an earlier job left: dentries,
  // page cache) and be reused; more, and the next sandbox gets a new cgroup. A print(1) or echo
  // job leaves tens of KiB.
  static constexpr uint64_t kMaxLeftoverBytes = 1 << 20;

  const KeeperArgs& a_;
  Channel ch_;
  SlotCgroup cgroup_;
  SeccompProgram seccomp_;
  NurserySeccomp nursery_seccomp_;
  UniqueFd nursery_lib_;        // set: the slot's sandboxes come from its nursery mother
  bool nursery_ = false;  // the slot's sandboxes come from its mother (nursery.h)
  std::string nursery_config_;  // what the mother is told at its start
  Sandbox mother_;              // the nursery mother's sandbox (its stub socket is the mother's)
  Sandbox sb_;
  SandboxCgroup spare_cgroup_;  // the last sandbox's cgroup, reset for the next (KeepCgroup)
  const RuntimeInfo* runtime_ = nullptr;  // the warm interpreter's, or none (the stub execs)
  // What a sandbox's stub execs at once (PrepareSandbox): the zygote of runtime_, or, with a
  // nursery, the mother (its sandboxes come from her); empty: the stub waits for a job.
  std::vector<std::string> stub_command_;
  uint64_t gen_ = 0;
};

}  // namespace

void KeeperMain(const KeeperArgs& args, UniqueFd channel) {
  SetLogComponent("keeper");
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != args.parent) ::_exit(1);
  ::signal(SIGCHLD, SIG_DFL);  // the spawner ignores it; we wait for our sandboxes
  ::signal(SIGPIPE, SIG_IGN);
  Channel ch(std::move(channel));
  SlotCgroup cgroup;
  // Opened while the host's file system is still ours (SetUpKeeper pivots into the base root):
  // for a template's nursery mother, or a session's shell mother.
  const bool nursery = args.session ? SessionShellMotherApplies(args.config) : NurseryApplies(args.config);
  UniqueFd nursery_lib = nursery ? OpenNurseryLibrary() : UniqueFd();
  UniqueFd loop_control;
  Status s = SetUpKeeper(args, &cgroup, &loop_control);
  if (!s.ok()) {
    LogError("keeper set-up failed", {{"slot", args.slot}, {"error", s.message()}});
    (void)ch.Send(static_cast<uint16_t>(MsgType::kFailed), Encode(FailedMsg{s.message()}));
    ::_exit(1);
  }
  auto seccomp = BuildSandboxSeccomp();
  if (!seccomp.ok()) {
    LogError("seccomp policy failed to build", {{"error", seccomp.status().message()}});
    (void)ch.Send(static_cast<uint16_t>(MsgType::kFailed), Encode(FailedMsg{seccomp.status().message()}));
    ::_exit(1);
  }
  if (args.session) {
    SessionKeeperMain(args.config, args.slot, std::move(ch), std::move(cgroup), std::move(seccomp.value()),
                      std::move(loop_control), std::move(nursery_lib));
  }
  // Decided here, once: the slot's sandboxes come from a mother (nursery.h), or each is made alone.
  std::optional<NurserySeccomp> nursery_seccomp;
  if (nursery_lib) {
    auto n = BuildNurserySeccomp();
    if (!n.ok()) {
      LogError("seccomp policy failed to build", {{"error", n.status().message()}});
      (void)ch.Send(static_cast<uint16_t>(MsgType::kFailed), Encode(FailedMsg{n.status().message()}));
      ::_exit(1);
    }
    nursery_seccomp = std::move(n.value());
  }
  Keeper k(args, std::move(ch), std::move(cgroup), std::move(seccomp.value()), std::move(nursery_lib),
           std::move(nursery_seccomp));
  k.Run();
}

}  // namespace sandpool
