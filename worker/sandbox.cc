#include "worker/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/clock.h"
#include "worker/cgroup.h"
#include "worker/messages.h"
#include "worker/rootfs.h"
#include "worker/seccomp/seccomp_policy.h"
#include "worker/zygote.h"

namespace sandpool {
namespace {

// struct clone_args of clone3(2), spelled out to avoid <linux/sched.h> clashing with <sched.h>.
struct CloneArgs {
  uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
      set_tid_size, cgroup;
};

constexpr uid_t kJobId = 1000;
constexpr const char* kDefaultPath = "/usr/local/bin:/usr/bin:/bin";

}  // namespace

// Failures inside init and the stub are reported to the keeper, never logged: their stderr is
// not the host's.
void InitFail(int status_fd, const std::string& what) {
  std::string msg = "F" + what;
  (void)!::write(status_fd, msg.data(), msg.size());
  ::_exit(1);
}

namespace {

// "E<errno> <stage>\n", the same report a zygote sends (zygote.h).
[[noreturn]] void StubExecFail(int sock, int err, const char* stage, int code) {
  char buf[64];
  int n = std::snprintf(buf, sizeof buf, "E%d %s\n", err, stage);
  (void)!::write(sock, buf, static_cast<size_t>(n));
  ::_exit(code);
}

}  // namespace

// Moves `fds` to 3, 4, ... in order and closes every other fd above 2.
void ArrangeFds(std::vector<int> fds) {
  for (int& fd : fds) fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 100);
  int next = 3;
  for (int fd : fds) {
    ::dup3(fd, next, O_CLOEXEC);
    ++next;
  }
  ::syscall(SYS_close_range, next, ~0U, 0);
}

void ResetSignals() {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  }
  sigset_t all;
  sigemptyset(&all);
  ::sigprocmask(SIG_SETMASK, &all, nullptr);
}

namespace {

void SetLimit(int resource, uint64_t soft, uint64_t hard) {
  struct rlimit rl = {static_cast<rlim_t>(soft), static_cast<rlim_t>(hard)};
  ::setrlimit(resource, &rl);
}

// The job's identity: sandbox uid/gid 1000, no capabilities in any set, no way back to root.
bool DropPrivileges() {
  if (::prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP_LOCKED |
                                     SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
                                     SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) != 0) {
    return false;
  }
  for (int cap = 0; cap <= 63; ++cap) {
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return false;
  }
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  if (::setresgid(kJobId, kJobId, kJobId) != 0) return false;
  if (::setresuid(kJobId, kJobId, kJobId) != 0) return false;
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capset, &hdr, data) != 0) return false;
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0;
}

std::string EnvValue(const std::vector<std::string>& env, std::string_view name) {
  for (const std::string& e : env) {
    if (e.size() > name.size() && e.compare(0, name.size(), name) == 0 && e[name.size()] == '=') {
      return e.substr(name.size() + 1);
    }
  }
  return {};
}

}  // namespace

void StubPrologue(const SandboxConfig& config, const SeccompProgram* seccomp) {
  const int sock = 3;
  if (::setsid() < 0) StubExecFail(sock, errno, "setsid", 126);
  if (!DropPrivileges()) StubExecFail(sock, errno, "privileges", 126);
  // init is not dumpable; the job is, as it would be after an execve (a nursery's job runs
  // without one): its /proc/self files are its own (environ, ...). Nothing can ptrace it:
  // the filter below forbids ptrace to every process of the sandbox.
  ::prctl(PR_SET_DUMPABLE, 1);
  SetLimit(RLIMIT_NOFILE, config.open_files, config.open_files);
  SetLimit(RLIMIT_FSIZE, config.file_size_bytes, config.file_size_bytes);
  // 1, not 0: for a piped core_pattern (apport, systemd-coredump) the kernel ignores the limit
  // except the special value 1, and a 1-byte file limit writes no core file either.
  SetLimit(RLIMIT_CORE, 1, 1);
  SetLimit(RLIMIT_MEMLOCK, 64 << 10, 64 << 10);
  // A quarter of the stack limit is what execve takes for argv and the environment together:
  // 8 MiB leaves room for the protocol's 1 MiB of argv plus 256 KiB of environment.
  struct rlimit stack;
  if (::getrlimit(RLIMIT_STACK, &stack) == 0 && stack.rlim_cur != RLIM_INFINITY && stack.rlim_cur < (8u << 20)) {
    SetLimit(RLIMIT_STACK, 8u << 20, std::max<rlim_t>(stack.rlim_max, 8u << 20));
  }
  ResetSignals();
  // The filter is the last thing set up, and it is loaded before the job arrives: loading it
  // costs ~0.1 ms, too much for the hot path. From here on only this stub's own code runs
  // (read the spec, chdir, setrlimit, execve), all of it under the filter.
  if (seccomp != nullptr) {
    int err = LoadSeccompProgram(*seccomp);
    if (err != 0) StubExecFail(sock, err, "seccomp", 126);
  }
}

namespace {

// Execs `cmd` in `cwd` with the template's base environment, keeping fds 3 .. 3+keep-1 (the
// socket and, for a mother, the nursery library) open across the exec; a failure is reported
// on fd 3 as `stage`.
[[noreturn]] void ExecInterpreter(std::vector<std::string> cmd, const SandboxConfig& config, const char* cwd,
                                  int keep, const char* stage) {
  const int sock = 3;
  std::vector<std::string> env = config.base_env;
  std::vector<char*> argv, envp;
  for (std::string& a : cmd) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (int fd = sock; fd < sock + keep; ++fd) ::fcntl(fd, F_SETFD, 0);
  if (::chdir(cwd) != 0) StubExecFail(sock, errno, "cwd", 126);
  ::execve(argv[0], argv.data(), envp.data());
  ::fcntl(sock, F_SETFD, FD_CLOEXEC);
  StubExecFail(sock, errno, stage, 127);
}

// The stub: fd 0-2 are the job's stdio, fd 3 the stub socket.
[[noreturn]] void StubMain(const SandboxConfig& config, const SeccompProgram* seccomp) {
  const int sock = 3;
  StubPrologue(config, seccomp);
  if (const RuntimeInfo* runtime = TemplateRuntime(config.runtime)) {
    // Become the template's warm interpreter now; it says 'R' itself when it is ready.
    ExecInterpreter(ZygoteCommand(*runtime), config, "/work", 1, "zygote");
  }
  if (::write(sock, "R", 1) != 1) ::_exit(125);

  uint32_t len = 0;
  if (!ReadExact(sock, &len, sizeof len).ok()) ::_exit(0);  // the keeper gave up on us
  std::string payload(len, '\0');
  if (!ReadExact(sock, payload.data(), len).ok()) ::_exit(0);
  RunMsg run;
  if (!Decode(payload, &run).ok() || run.argv.empty()) StubExecFail(sock, EINVAL, "spec", 126);

  if (run.cpu_time_ms > 0) {
    // SIGXCPU at the soft limit, SIGKILL a second later; the keeper also watches the cgroup.
    uint64_t s = (run.cpu_time_ms + 999) / 1000;
    SetLimit(RLIMIT_CPU, s, s + 1);
  }
  if (run.file_size_bytes > 0) SetLimit(RLIMIT_FSIZE, run.file_size_bytes, run.file_size_bytes);
  if (run.open_files > 0) SetLimit(RLIMIT_NOFILE, run.open_files, run.open_files);
  if (::chdir(run.cwd.empty() ? "/work" : run.cwd.c_str()) != 0) StubExecFail(sock, errno, "cwd", 126);

  std::vector<char*> argv, envp;
  for (std::string& a : run.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : run.env) envp.push_back(e.data());
  envp.push_back(nullptr);

  std::vector<std::string> candidates;
  if (run.argv[0].find('/') != std::string::npos) {
    candidates.push_back(run.argv[0]);
  } else {
    std::string path = EnvValue(run.env, "PATH");
    if (path.empty()) path = kDefaultPath;
    size_t start = 0;
    while (start <= path.size()) {
      size_t end = path.find(':', start);
      if (end == std::string::npos) end = path.size();
      std::string dir = path.substr(start, end - start);
      candidates.push_back((dir.empty() ? "." : dir) + "/" + run.argv[0]);
      start = end + 1;
    }
  }
  int first_err = ENOENT;
  for (const std::string& c : candidates) {
    ::execve(c.c_str(), argv.data(), envp.data());
    // Like execvp: remember a permission problem, keep looking past missing files.
    if (errno != ENOENT && errno != ENOTDIR) first_err = first_err == ENOENT ? errno : first_err;
    if (errno != ENOENT && errno != ENOTDIR && errno != EACCES) break;
  }
  StubExecFail(sock, first_err, "exec", first_err == ENOENT ? 127 : 126);
}

// A template's nursery mother (nursery.h): fd 3 its socket to the keeper, fd 4 the nursery
// library. It stays sandbox root, with capabilities in the sandbox's user namespace only (it
// clones each job's namespaces and mounts its filesystems), and never runs job code: each job's
// process is a clone that drops everything first. It takes no seccomp filter, since clone3 and
// mount are what it is for; its children load the job's.
[[noreturn]] void MotherMain(const SandboxConfig& config) {
  if (::setsid() < 0) StubExecFail(3, errno, "setsid", 126);
  SetLimit(RLIMIT_CORE, 1, 1);
  ResetSignals();
  std::vector<std::string> cmd = ZygoteCommand(*FindRuntime("python"));
  cmd.push_back("mother");
  ExecInterpreter(std::move(cmd), config, "/", 2, "mother");
}

struct StubArgs {
  const SandboxConfig* config;
  const SeccompProgram* seccomp;
  int nursery_lib;  // >= 0: this stub becomes the template's nursery mother (nursery.h)
};

// The stub's first frame, on its own stack: from here on nothing returns into init's frames.
int StubEntry(void* arg) {
  auto* a = static_cast<StubArgs*>(arg);
  ::dup2(6, 0);
  ::dup2(7, 1);
  ::dup2(8, 2);
  if (a->nursery_lib >= 0) {
    ArrangeFds({5, a->nursery_lib});
    MotherMain(*a->config);
  }
  ArrangeFds({5});
  StubMain(*a->config, a->seccomp);
}

}  // namespace

void InitSetUp(const SandboxConfig& config) {
  const int sync_fd = 3, status_fd = 4;
  char go;
  if (::read(sync_fd, &go, 1) != 1) ::_exit(1);  // the keeper died before writing our maps
  // Become sandbox root (host_id_base+2n): until now our host uid was still 0.
  if (::setresgid(0, 0, 0) != 0 || ::setresuid(0, 0, 0) != 0) InitFail(status_fd, "setresuid: " + std::string(std::strerror(errno)));
  if (::unshare(CLONE_NEWCGROUP) != 0) InitFail(status_fd, "unshare(CLONE_NEWCGROUP): " + std::string(std::strerror(errno)));
  // The parent-death signal is reset by credential changes, so it is set after them; if the
  // keeper is already gone, the sync pipe has hung up.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::prctl(PR_SET_DUMPABLE, 0);
  struct pollfd p = {sync_fd, POLLIN, 0};
  if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR))) ::_exit(1);
  if (::sethostname(config.hostname.data(), config.hostname.size()) != 0) {
    InitFail(status_fd, "sethostname: " + std::string(std::strerror(errno)));
  }
  Status s = MountSandboxFilesystems(config);
  if (!s.ok()) InitFail(status_fd, s.message());
}

void InitServe(const SandboxConfig& config, pid_t stub) {
  const int status_fd = 4;
  if (stub < 0) InitFail(status_fd, "create stub: " + std::string(std::strerror(errno)));
  // init keeps none of the job's fds (the pipes must reach EOF when the job's processes die)
  // and none of the host's (its stdio was the keeper's).
  int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd = 0; fd < 3; ++fd) ::dup2(devnull, fd);
  for (int fd = 5; fd <= 8; ++fd) ::close(fd);
  for (;;) {
    int st = 0;
    pid_t pid = ::waitpid(-1, &st, __WALL);
    if (pid < 0) {
      if (errno == EINTR) continue;
      InitFail(status_fd, "stub vanished");
    }
    if (pid != stub) continue;  // reap orphans of the job
    // Everything else in the namespace dies now and is reaped before the report: the keeper
    // reports the job's end on it, and by then no process of the job may be left. (Our own
    // exit would kill them too, but only after the report and our own teardown.)
    ::kill(-1, SIGKILL);
    while (::waitpid(-1, nullptr, __WALL) > 0 || errno == EINTR) {
    }
    InitReport r{};
    r.wait_status = st;
    // An overlay reports its upper layer's space.
    const char* cow_dirs[] = {HasCopyOnWriteRoot(config) ? "/" : nullptr,
                              HasCopyOnWriteLayer(config) ? config.layer_mount.c_str() : nullptr};
    for (const char* dir : {"/work", "/tmp", "/var/tmp", "/dev/shm", cow_dirs[0], cow_dirs[1]}) {
      struct statvfs v;
      if (dir != nullptr && ::statvfs(dir, &v) == 0 && (v.f_bavail == 0 || v.f_favail == 0)) r.disk_full = 1;
    }
    char buf[1 + sizeof r];
    buf[0] = 'S';
    std::memcpy(buf + 1, &r, sizeof r);
    (void)!::write(status_fd, buf, sizeof buf);
    ::_exit(0);  // the kernel now kills everything left in the pid namespace
  }
}

namespace {

// init, pid 1 of the sandbox. Fds: 3 sync (read), 4 status (write), 5 stub socket,
// 6 stdin read end, 7 stdout write end, 8 stderr write end (9: the nursery library, for a mother).
[[noreturn]] void InitMain(const SandboxConfig& config, const SeccompProgram* seccomp, int nursery_lib) {
  InitSetUp(config);
  // The stub shares init's memory until it execs (CLONE_VM | CLONE_VFORK: init is suspended
  // meanwhile): no page tables are copied, no copy-on-write faults taken, no copy torn down at
  // the exec. Address-space work is what process creation costs most, on virtual machines by far
  // (here: a fork of a small process 0.86 ms, a vfork 0.025 ms). Its stack is its own.
  StubArgs stub_args{&config, seccomp, nursery_lib};
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer cannot follow a switch to another stack (it warns, into the job's stderr):
  // sanitizer builds fork the stub.
  pid_t stub = ::fork();
  if (stub == 0) StubEntry(&stub_args);
#else
  constexpr size_t kStubStack = 256 << 10;
  void* stack = ::mmap(nullptr, kStubStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) InitFail(4, "stub stack: " + std::string(std::strerror(errno)));
  pid_t stub = ::clone(StubEntry, static_cast<char*>(stack) + kStubStack, CLONE_VM | CLONE_VFORK | SIGCHLD, &stub_args);
  ::munmap(stack, kStubStack);
#endif
  InitServe(config, stub);
}

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

void KillSandbox(const Sandbox& sb) {
  if (sb.pidfd) ::syscall(SYS_pidfd_send_signal, sb.pidfd.get(), SIGKILL, nullptr, 0);
}

long CloneInit(uint64_t namespaces, int* pidfd) {
  CloneArgs args{};
  args.flags = namespaces | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(pidfd);
  args.exit_signal = SIGCHLD;
  return ::syscall(SYS_clone3, &args, sizeof args);
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

Result<Sandbox> FinishSandbox(Sandbox sb, SlotCgroup& cgroup, const std::string& id_map) {
  auto fail = [&](const Status& s) -> Status {
    KillSandbox(sb);
    // init is our child unless a nursery mother made it (then the mother reaps it).
    siginfo_t info;
    ::waitid(P_PIDFD, static_cast<id_t>(sb.pidfd.get()), &info, WEXITED);
    struct pollfd dead = {sb.pidfd.get(), POLLIN, 0};
    ::poll(&dead, 1, 1000);
    std::string report = DrainStatus(sb.status.get());
    if (!report.empty() && report[0] == 'F') return Status::Error("sandbox init: " + report.substr(1));
    return s;
  };
  // init waits on the sync pipe, so it is in its cgroup before it runs anything of its own.
  Status s = cgroup.Attach(sb.init_pid);
  if (s.ok() && !id_map.empty()) {
    s = WriteProcFile(sb.init_pid, "setgroups", "deny");
    if (s.ok()) s = WriteProcFile(sb.init_pid, "uid_map", id_map);
    if (s.ok()) s = WriteProcFile(sb.init_pid, "gid_map", id_map);
  }
  if (s.ok() && ::write(sb.sync.get(), "g", 1) != 1) s = ErrnoStatus("write sync");
  if (!s.ok()) return fail(s);

  // Wait for the stub's 'R'; init dying first means setup failed.
  struct pollfd p[2] = {{sb.stub.get(), POLLIN, 0}, {sb.pidfd.get(), POLLIN, 0}};
  int n;
  do {
    n = ::poll(p, 2, 10000);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return fail(Status::Error("sandbox did not become ready within 10 s"));
  char r = 0;
  if (!(p[0].revents & POLLIN) || ::read(sb.stub.get(), &r, 1) != 1 || r != 'R') {
    // The stub (or the zygote) may have reported a setup error instead of 'R'.
    if (r == 'E') {
      char buf[64] = {};
      (void)!::read(sb.stub.get(), buf, sizeof buf - 1);
      return fail(Status::Error(std::string("sandbox stub: E") + buf));
    }
    return fail(Status::Error("sandbox exited during setup"));
  }
  return sb;
}

Result<Sandbox> PrepareSandbox(const SandboxConfig& config, uint32_t slot, SlotCgroup& cgroup,
                               const SeccompProgram* seccomp, int nursery_lib) {
  auto fds = MakeSandboxFds();
  if (!fds.ok()) return fds.status();

  int pidfd = -1;
  // A user namespace belongs to the effective uid that creates it, and the kernel charges the
  // per-user budgets of everything inside (inotify instances and watches, POSIX message queues,
  // ...) to that owner on the host too. Created as root, every sandbox would spend root's
  // budgets: one job could exhaust inotify for the whole host. So the keeper creates it as the
  // slot's unprivileged sandbox-root uid. (Effective capabilities are dropped meanwhile and come
  // back with euid 0; that is also why CLONE_INTO_CGROUP is not used: its permission check
  // would then need a cgroup.procs writable by every slot's uid. init is placed in its cgroup
  // below instead, before it runs anything.)
  uint32_t owner = config.host_id_base + 2 * slot;
  if (::setresuid(static_cast<uid_t>(-1), owner, static_cast<uid_t>(-1)) != 0) return ErrnoStatus("seteuid for clone");
  // The cgroup namespace is created by init itself once it sits in its slot cgroup, so that
  // cgroup is its root.
  long pid = CloneInit(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS, &pidfd);
  int clone_errno = errno;
  if (pid != 0 && ::setresuid(static_cast<uid_t>(-1), 0, static_cast<uid_t>(-1)) != 0) ::_exit(1);  // cannot go on unprivileged
  if (pid < 0) return ErrnoStatus("clone3", clone_errno);
  if (pid == 0) {
    std::vector<int> keep;
    for (UniqueFd& f : fds->inside) keep.push_back(f.get());
    if (nursery_lib >= 0) keep.push_back(nursery_lib);
    ArrangeFds(keep);
    InitMain(config, seccomp, nursery_lib >= 0 ? 9 : -1);
  }
  Sandbox sb = std::move(fds->sb);
  sb.init_pid = static_cast<pid_t>(pid);
  sb.pidfd.reset(pidfd);
  // Our copies of the sandbox's ends close here, so EOFs mean what they should.
  for (UniqueFd& f : fds->inside) f.reset();
  uint32_t root = config.host_id_base + 2 * slot;
  std::string map = "0 " + std::to_string(root) + " 1\n" + std::to_string(kJobId) + " " +
                    std::to_string(root + 1) + " 1\n";
  return FinishSandbox(std::move(sb), cgroup, map);
}

}  // namespace sandpool
