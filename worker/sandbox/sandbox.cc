#include "worker/sandbox/sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/syscalls.h"
#include "worker/ipc/fd_passing.h"
#include "worker/ipc/stub_protocol.h"
#include "worker/sandbox/cgroup.h"
#include "worker/sandbox/mount_util.h"
#include "worker/sandbox/sandbox_init.h"

namespace sandpool {
namespace {


Status WriteProcFile(pid_t pid, const char* name, const std::string& value) {
  std::string path = "/proc/" + std::to_string(pid) + "/" + name;
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open " + path);
  if (::write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size())) {
    return ErrnoStatus("write " + path);
  }
  return Status::Ok();
}

}  // namespace

std::string DrainStatus(int fd) {
  std::string out;
  char buf[512];
  SetNonBlocking(fd).ok();
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string ReadReportToEof(int fd) {
  std::string out;
  char buf[512];
  SetNonBlocking(fd, false).ok();
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

void KillSandbox(const Sandbox& sb) {
  if (sb.pidfd) sys::PidfdSendSignal(sb.pidfd.get(), SIGKILL);
}

Result<SandboxFds> MakeSandboxFds() {
  auto sync = MakePipe();
  auto status = MakePipe();
  auto in = MakePipe();
  auto out = MakePipe();
  auto err = MakePipe();
  auto stub = MakeSocketPair(SOCK_STREAM);
  for (const Status* s : {&sync.status(), &status.status(), &in.status(), &out.status(), &err.status(), &stub.status()}) {
    if (!s->ok()) return *s;
  }
  SandboxFds f;
  f.sb.sync = std::move(sync->write);
  f.sb.status = std::move(status->read);
  f.sb.stub = std::move(stub->a);
  f.sb.stdin_w = std::move(in->write);
  f.sb.stdout_r = std::move(out->read);
  f.sb.stderr_r = std::move(err->read);
  f.inside[0] = std::move(sync->read);
  f.inside[1] = std::move(status->write);
  f.inside[2] = std::move(stub->b);
  f.inside[3] = std::move(in->read);
  f.inside[4] = std::move(out->write);
  f.inside[5] = std::move(err->write);
  return f;
}

Result<Sandbox> FinishSandbox(Sandbox sb, const std::string& id_map) {
  auto fail = [&](const Status& s) -> Status {
    KillSandbox(sb);
    // init is our child unless a nursery mother made it (then the mother reaps it).
    siginfo_t info;
    ::waitid(P_PIDFD, static_cast<id_t>(sb.pidfd.get()), &info, WEXITED);
    struct pollfd dead = {sb.pidfd.get(), POLLIN, 0};
    ::poll(&dead, 1, 1000);
    (void)sb.cgroup.Remove();
    std::string failure = InitFailure(DrainStatus(sb.status.get()));
    if (!failure.empty()) return Status::Error("sandbox init: " + failure);
    return s;
  };
  // init waits on the sync pipe, so it is in its cgroup before it runs anything of its own.
  Status s = sb.cgroup.Attach(sb.init_pid);
  if (s.ok() && !id_map.empty()) {
    s = WriteProcFile(sb.init_pid, "setgroups", "deny");
    if (s.ok()) s = WriteProcFile(sb.init_pid, "uid_map", id_map);
    if (s.ok()) s = WriteProcFile(sb.init_pid, "gid_map", id_map);
  }
  if (s.ok() && ::write(sb.sync.get(), "g", 1) != 1) s = ErrnoStatus("write sync");
  if (!s.ok()) return fail(s);

  // Wait for the stub's 'R' (a shell zygote's stub sends its script pipe first); init dying
  // first means setup failed.
  const int64_t deadline = MonotonicUs() + 10'000'000;
  char r = 0;
  for (;;) {
    struct pollfd p[2] = {{sb.stub.get(), POLLIN, 0}, {sb.pidfd.get(), POLLIN, 0}};
    int64_t left_ms = (deadline - MonotonicUs()) / 1000;
    int n = left_ms > 0 ? ::poll(p, 2, static_cast<int>(left_ms)) : 0;
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return fail(Status::Error("sandbox did not become ready within 10 s"));
    r = 0;
    UniqueFd fd;
    if (!(p[0].revents & POLLIN) || !ReceiveWithFd(sb.stub.get(), &r, &fd).ok()) r = 0;
    if (r != kStubScriptPipe || sb.script) break;
    if (!fd) return fail(Status::Error("sandbox stub: a script pipe message without the pipe"));
    // Written without blocking the keeper's loop (keeper.cc, Serve).
    if (::fcntl(fd.get(), F_SETFL, O_NONBLOCK) != 0) return fail(ErrnoStatus("script pipe"));
    sb.script = std::move(fd);
  }
  if (r != kStubReady) {
    // The stub (or the zygote) may have reported a setup error instead of 'R'.
    if (r == 'E') {
      std::string said(1, r);
      said += DrainStatus(sb.stub.get());
      StubReport report = ParseStubReport(said);
      return fail(Status::Error("sandbox stub: " + report.stage + ": " + std::strerror(report.error)));
    }
    return fail(Status::Error("sandbox exited during setup"));
  }
  return sb;
}

namespace {

// What init becomes after clone: a job sandbox's init (InitMain, with `command` and
// `nursery_lib`), or, given `custom_init`, that (with `fresh`).
Result<Sandbox> CloneSandbox(const SandboxConfig& config, uint32_t slot, SandboxCgroup cgroup,
                             const SeccompProgram* seccomp, const std::vector<std::string>* command,
                             int nursery_lib, CustomInit custom_init, bool fresh) {
  auto fds = MakeSandboxFds();
  if (!fds.ok()) {
    (void)cgroup.Remove();
    return fds.status();
  }

  int pidfd = -1;
  // A user namespace belongs to the effective uid that creates it, and the kernel charges the
  // per-user budgets of everything inside (inotify instances and watches, POSIX message queues,
  // ...) to that owner on the host too. Created as root, every sandbox would spend root's
  // budgets: one job could exhaust inotify for the whole host. So the keeper creates it as the
  // slot's unprivileged sandbox-root uid. (Effective capabilities are dropped meanwhile and come
  // back with euid 0; that is also why CLONE_INTO_CGROUP is not used: its permission check
  // would then need a cgroup.procs writable by every slot's uid. init is placed in its cgroup
  // below instead, before it runs anything.)
  uint32_t owner = config.SlotRootId(slot);
  if (::setresuid(static_cast<uid_t>(-1), owner, static_cast<uid_t>(-1)) != 0) return ErrnoStatus("seteuid for clone");
  // The cgroup namespace is created by init itself once it sits in its slot cgroup, so that
  // cgroup is its root.
  // The fds init takes, gathered before the clone (the child should not allocate before it
  // knows its fds are in place).
  int keep[7];
  int nkeep = 0;
  for (UniqueFd& f : fds->inside) keep[nkeep++] = f.get();
  if (nursery_lib >= 0) keep[nkeep++] = nursery_lib;
  long pid = sys::Clone3(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS, &pidfd);
  int clone_errno = errno;
  if (pid != 0 && ::setresuid(static_cast<uid_t>(-1), 0, static_cast<uid_t>(-1)) != 0) ::_exit(1);  // cannot go on unprivileged
  if (pid < 0) {
    (void)cgroup.Remove();
    return ErrnoStatus("clone3", clone_errno);
  }
  if (pid == 0) {
    if (int err = ArrangeFds(keep, nkeep)) ::_exit(100 + err % 100);  // its status pipe is not in place
    if (custom_init != nullptr) {
      custom_init(config, seccomp, fresh, nursery_lib >= 0 ? 9 : -1);
      ::_exit(1);  // it never returns
    }
    InitMain(config, seccomp, *command, nursery_lib >= 0 ? 9 : -1);
  }
  Sandbox sb = std::move(fds->sb);
  sb.init_pid = static_cast<pid_t>(pid);
  sb.pidfd.reset(pidfd);
  sb.cgroup = std::move(cgroup);
  // Our copies of the sandbox's ends close here, so EOFs mean what they should.
  for (UniqueFd& f : fds->inside) f.reset();
  return FinishSandbox(std::move(sb), CanonicalOwnersMap(config.SlotRootId(slot)));
}

}  // namespace

Result<Sandbox> PrepareSandbox(const SandboxConfig& config, uint32_t slot, SandboxCgroup cgroup,
                               const SeccompProgram* seccomp, const std::vector<std::string>& command,
                               int nursery_lib) {
  return CloneSandbox(config, slot, std::move(cgroup), seccomp, &command, nursery_lib, nullptr, false);
}

Result<Sandbox> PrepareSessionSandbox(const SandboxConfig& config, uint32_t slot, SandboxCgroup cgroup,
                                      const SeccompProgram* seccomp, bool fresh, CustomInit init,
                                      int nursery_lib) {
  return CloneSandbox(config, slot, std::move(cgroup), seccomp, nullptr, nursery_lib, init, fresh);
}

}  // namespace sandpool
