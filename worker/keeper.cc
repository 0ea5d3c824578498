#include "worker/keeper.h"

#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
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
#include "worker/channel.h"
#include "worker/messages.h"
#include "worker/nursery.h"
#include "worker/rootfs.h"
#include "worker/sandbox.h"
#include "worker/seccomp/seccomp_policy.h"
#include "worker/stub_protocol.h"
#include "worker/zygote.h"

namespace sandpool {
namespace {

Status BringUpLoopback() {
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) return ErrnoStatus("socket");
  struct ifreq ifr = {};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(s.get(), SIOCGIFFLAGS, &ifr) != 0) return ErrnoStatus("SIOCGIFFLAGS lo");
  ifr.ifr_flags |= IFF_UP;
  if (::ioctl(s.get(), SIOCSIFFLAGS, &ifr) != 0) return ErrnoStatus("SIOCSIFFLAGS lo");
  return Status::Ok();
}

// One-time set-up of the keeper process itself.
Status SetUpKeeper(const KeeperArgs& a, SlotCgroup* cgroup) {
  // The host root's supplementary groups would otherwise follow every sandbox process into its
  // user namespace and keep granting group access to host files.
  if (::setgroups(0, nullptr) != 0) return ErrnoStatus("setgroups");
  auto cg = SlotCgroup::Create(a.layout, a.slot, a.config.cgroup);
  if (!cg.ok()) return cg.status().Prefixed("slot cgroup");
  *cgroup = std::move(cg.value());
  if (::unshare(CLONE_NEWNET) != 0) return ErrnoStatus("unshare(CLONE_NEWNET)");
  SP_RETURN_IF_ERROR(BringUpLoopback());
  if (::unshare(CLONE_NEWNS) != 0) return ErrnoStatus("unshare(CLONE_NEWNS)");
  return BuildKeeperRoot(a.config, a.slot).Prefixed("sandbox root");
}

class Keeper {
 public:
  Keeper(const KeeperArgs& a, Channel channel, SlotCgroup cgroup, SeccompProgram seccomp, UniqueFd nursery_lib)
      : a_(a), ch_(std::move(channel)), cgroup_(std::move(cgroup)), seccomp_(std::move(seccomp)),
        nursery_lib_(std::move(nursery_lib)) {
    runtime_ = TemplateRuntime(a.config.runtime);
    if (nursery_lib_) nursery_config_ = EncodeNurseryConfig(a.config, seccomp_);
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
      ++gen_;
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
  // The next sandbox: cloned by the keeper, or by the slot's nursery mother (started first if
  // it is not running: the cold path, after start-up only when a mother died).
  Result<Sandbox> Prepare() {
    if (!nursery_lib_) return PrepareSandbox(a_.config, a_.slot, cgroup_, &seccomp_);
    if (!MotherAlive()) {
      auto m = PrepareSandbox(a_.config, a_.slot, cgroup_, &seccomp_, nursery_lib_.get());
      if (!m.ok()) return m.status().Prefixed("nursery mother");
      mother_ = std::move(m.value());
      mother_.stdin_w.reset();
      Status s = SendNurseryConfig(mother_.stub.get(), nursery_config_);
      if (!s.ok()) return s;
    }
    auto sb = NurseryPrepareSandbox(mother_.stub.get(), cgroup_);
    if (!sb.ok()) {
      if (!MotherAlive()) return sb.status().Prefixed("the nursery mother died: " + MotherOutput());
      // A mother that could not make a sandbox (wedged, or out of step on its socket) is not
      // asked again: the next attempt starts a new one.
      KillSandbox(mother_);
      siginfo_t info;
      ::waitid(P_PIDFD, static_cast<id_t>(mother_.pidfd.get()), &info, WEXITED);
      mother_ = Sandbox();
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

  // What a dead mother left on its stdout and stderr, for the log.
  std::string MotherOutput() {
    std::string out = DrainStatus(mother_.stderr_r.get()) + DrainStatus(mother_.stdout_r.get());
    std::string init = DrainStatus(mother_.status.get());
    if (!init.empty() && init[0] == 'F') out += " init: " + init.substr(1);
    mother_ = Sandbox();
    return out.size() > 2000 ? out.substr(out.size() - 2000) : out;
  }

  // Kills the sandbox: init through its pidfd (the pid namespace then takes every process with
  // it) and, on cgroup v2, everything in the slot cgroup at once with cgroup.kill as well,
  // unless the slot's nursery mother lives there too.
  void Kill() {
    KillSandbox(sb_);
    if (!nursery_lib_) (void)cgroup_.KillAll();
  }

  void Send(MsgType t, const std::string& payload, const std::vector<int>& fds = {}) {
    Status s = ch_.Send(static_cast<uint16_t>(t), payload, fds);
    if (!s.ok()) Exit("scheduler channel: " + s.message());
  }

  [[noreturn]] void Exit(const std::string& why) {
    LogDebug("keeper exiting", {{"slot", a_.slot}, {"why", why}});
    Kill();
    KillSandbox(mother_);
    if (sb_.pidfd) {
      siginfo_t info;
      ::waitid(P_PIDFD, static_cast<id_t>(sb_.pidfd.get()), &info, WEXITED);
    }
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

  // Serves the current sandbox until it is gone, then reports Exited.
  void Serve() {
    bool run_sent = false, started = false, killed = false, cpu_limit = false;
    int64_t exec_at = 0, exec_end = 0;
    uint64_t cpu_limit_us = 0;
    std::string stub_said;  // what the stub or zygote wrote back after the job was sent
    std::string to_stub;    // the job's bytes not yet taken by the stub's socket
    size_t to_stub_off = 0;
    bool have_exec_error = false;
    int exec_errno = 0;
    std::string exec_stage;
    CgroupStats base{};
    // init's report: 'S' + InitReport once the job's main process has ended, written just
    // before init exits. The job's end is reported on it, not on init's death, which comes
    // later (init's own teardown, the pid and mount namespaces'): nothing of the job is left
    // to run by then, and its output is complete when the pipes reach EOF, which the scheduler
    // waits for anyway. The slot is prepared again only once init is gone.
    std::string report;
    bool status_open = true, have_report = false;
    auto on_stub_eof = [&] {
      // EOF after 'S': the exec happened (close-on-exec) or the zygote started the job, unless
      // an error report came; EOF without 'S': the stub died before the job started.
      StubReport said = ParseStubReport(stub_said);
      if (said.failed()) {
        have_exec_error = true;
        exec_errno = said.error;
        exec_stage = said.stage;
      } else if (said.starting && !started) {
        started = true;
        exec_at = MonotonicUs();
        Send(MsgType::kStarted, Encode(GenerationMsg{gen_}));
      }
      sb_.stub.reset();
      run_sent = false;
      to_stub.clear();
    };
    for (;;) {
      short stub_events = static_cast<short>(to_stub.empty() ? POLLIN : POLLIN | POLLOUT);
      struct pollfd p[4] = {{ch_.fd(), POLLIN, 0},
                            {sb_.pidfd.get(), POLLIN, 0},
                            {run_sent ? sb_.stub.get() : -1, stub_events, 0},
                            {status_open ? sb_.status.get() : -1, POLLIN, 0}};
      // A CPU-time limit is watched on the whole cgroup, so it covers every process of the job.
      int timeout = (started && cpu_limit_us > 0) ? 20 : -1;
      int n = ::poll(p, 4, timeout);
      if (n < 0) {
        if (errno == EINTR) continue;
        Exit("poll: " + std::string(std::strerror(errno)));
      }
      if (started && cpu_limit_us > 0 && !killed) {
        auto st = cgroup_.Read();
        if (st.ok() && st->cpu_usage_us - base.cpu_usage_us > cpu_limit_us) {
          cpu_limit = killed = true;
          Kill();
        }
      }
      if (p[0].revents) {
        for (Frame& f : ReadFrames()) {
          if (f.type == static_cast<uint16_t>(MsgType::kRun) && !run_sent && !killed) {
            RunMsg run;
            if (!Decode(f.payload, &run).ok() || run.generation != gen_) continue;
            Status s = cgroup_.SetLimits(run.memory_bytes, run.pids);
            if (!s.ok()) LogWarn("cgroup limits", {{"error", s.message()}});
            (void)cgroup_.ResetPeak();
            if (auto st = cgroup_.Read(); st.ok()) base = *st;
            cpu_limit_us = run.cpu_time_ms * 1000;
            // The stub (or zygote) is blocked reading; the job goes to it as the socket takes it
            // (POLLOUT below), so a large job never blocks this loop.
            if (runtime_ == nullptr) {
              to_stub = EncodeExecImage(run, DefaultPath());
            } else {
              to_stub = ZygotePayload(*runtime_, run);
            }
            to_stub_off = 0;
            run_sent = true;
          } else if (f.type == static_cast<uint16_t>(MsgType::kKill)) {
            GenerationMsg k;
            if (Decode(f.payload, &k).ok() && k.generation == gen_ && !killed) {
              killed = true;
              Kill();
            }
          }
        }
      }
      if (p[2].revents & POLLOUT) {
        while (to_stub_off < to_stub.size()) {
          ssize_t w = ::send(sb_.stub.get(), to_stub.data() + to_stub_off, to_stub.size() - to_stub_off,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
          if (w < 0 && errno == EINTR) continue;
          if (w < 0 && errno == EAGAIN) break;
          // The stub died (EPIPE): the rest is dropped; its end shows on the pidfd.
          to_stub_off = w < 0 ? to_stub.size() : to_stub_off + static_cast<size_t>(w);
          if (to_stub_off == to_stub.size()) {
            to_stub.clear();
            to_stub_off = 0;
            // A zygote reads its job to EOF.
            if (runtime_ != nullptr) ::shutdown(sb_.stub.get(), SHUT_WR);
            break;
          }
        }
      }
      if (p[2].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[128];
        ssize_t r = ::read(sb_.stub.get(), buf, sizeof buf);
        if (r > 0 && stub_said.size() < 256) stub_said.append(buf, static_cast<size_t>(r));
        if (r <= 0) on_stub_eof();
      }
      if (p[3].revents) {
        char buf[64];
        ssize_t r = ::read(sb_.status.get(), buf, sizeof buf);
        if (r > 0) report.append(buf, static_cast<size_t>(r));
        if (r <= 0) status_open = false;  // init died without a report: its pidfd tells
        InitReport ir;
        if (DecodeInitReport(report, &ir)) {
          exec_end = MonotonicUs();
          // Every process of the job is gone (init reaped them all), so is every holder of the
          // stub socket's other end: take what was said, then its EOF.
          if (sb_.stub) {
            stub_said += DrainStatus(sb_.stub.get());
            if (stub_said.size() > 256) stub_said.resize(256);
            on_stub_eof();
          }
          have_report = true;
          break;
        }
      }
      if (p[1].revents) {
        exec_end = MonotonicUs();
        siginfo_t info = {};
        ::waitid(P_PIDFD, static_cast<id_t>(sb_.pidfd.get()), &info, WEXITED);
        break;
      }
    }
    ExitedMsg ex;
    ex.generation = gen_;
    ex.started = started;
    ex.killed = killed;
    ex.cpu_limit = cpu_limit;
    if (have_exec_error) {
      ex.exec_errno = exec_errno == 0 ? ENOENT : exec_errno;
      ex.exec_stage = exec_stage;
    }
    if (!have_report) report += DrainStatus(sb_.status.get());
    if (InitReport ir; DecodeInitReport(report, &ir)) {
      ex.have_status = true;
      ex.wait_status = ir.wait_status;
      ex.disk_full = ir.disk_full != 0;
    }
    if (auto st = cgroup_.Read(); st.ok()) {
      ex.cpu_time_us = st->cpu_usage_us - base.cpu_usage_us;
      ex.peak_memory_bytes = st->peak_memory_bytes;
      ex.oom_kills = st->oom_kills - base.oom_kills;
      ex.pids_max_hits = st->pids_max_hits - base.pids_max_hits;
    }
    if (started && exec_end >= exec_at) ex.exec_time_us = static_cast<uint64_t>(exec_end - exec_at);
    UniqueFd init = std::move(sb_.pidfd);
    sb_ = Sandbox();
    Send(MsgType::kExited, Encode(ex));
    if (have_report) AwaitDeath(init.get());
  }

  // init reported and is exiting; the next sandbox waits until it is gone (the slot's cgroup
  // empty, every process of the job dead). One that does not go within 10 s is killed.
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

  const KeeperArgs& a_;
  Channel ch_;
  SlotCgroup cgroup_;
  SeccompProgram seccomp_;
  UniqueFd nursery_lib_;        // set: python sandboxes come from the slot's nursery mother
  std::string nursery_config_;  // what the mother is told at its start
  Sandbox mother_;              // the nursery mother's sandbox (its stub socket is the mother's)
  Sandbox sb_;
  const RuntimeInfo* runtime_ = nullptr;  // the warm interpreter's, or none (the stub execs)
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
  // Opened while the host's file system is still ours (SetUpKeeper pivots into the base root).
  UniqueFd nursery_lib = NurseryApplies(args.config) ? OpenNurseryLibrary() : UniqueFd();
  Status s = SetUpKeeper(args, &cgroup);
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
  Keeper k(args, std::move(ch), std::move(cgroup), std::move(seccomp.value()), std::move(nursery_lib));
  k.Run();
}

}  // namespace sandpool
