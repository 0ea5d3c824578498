// Inside a sandbox, after clone: init and the stub. Read the rules in sandbox_init.h first.
#include "worker/sandbox/sandbox_init.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/asan.h"
#include "common/runtimes.h"
#include "common/syscalls.h"
#include "worker/ipc/fd_passing.h"
#include "worker/ipc/stub_protocol.h"
#include "worker/sandbox/rootfs.h"
#include "worker/seccomp/seccomp_policy.h"

namespace sandpool {
namespace {

constexpr int kStatusFd = 4;  // init's status pipe
constexpr int kStubSock = 3;  // the stub's socket, after ArrangeFds

// ---- Async-signal-safe helpers (the stub's) ---------------------------------------------------

[[noreturn]] void StubFail(int err, const char* stage, int code) {
  char buf[64];
  size_t n = FormatStubFailure(buf, err, stage);
  (void)!::write(kStubSock, buf, n);
  ::_exit(code);
}

int SetLimit(int resource, uint64_t soft, uint64_t hard) {
  struct rlimit rl = {static_cast<rlim_t>(soft), static_cast<rlim_t>(hard)};
  return ::setrlimit(resource, &rl) == 0 ? 0 : errno;
}

// Reads exactly `len` bytes; false on EOF or error.
bool ReadFull(int fd, void* data, size_t len) {
  auto* p = static_cast<char*>(data);
  while (len > 0) {
    ssize_t n = ::read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

// The job's identity: sandbox uid/gid 1000, no capabilities in any set, no way back to root.
// Returns 0 or the errno of the step that failed.
int DropPrivileges() {
  if (::prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP_LOCKED |
                                     SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
                                     SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) != 0) {
    return errno;
  }
  for (int cap = 0; cap <= 63; ++cap) {
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return errno;
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) return errno;
  if (::setresgid(kSandboxJobUid, kSandboxJobUid, kSandboxJobUid) != 0) return errno;
  if (::setresuid(kSandboxJobUid, kSandboxJobUid, kSandboxJobUid) != 0) return errno;
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  if (sys::Capset(&hdr, data) != 0) return errno;
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 ? 0 : errno;
}

// What init prepares for its stub before cloning it: the stub itself allocates nothing.
struct StubPlan {
  const SandboxConfig* config;
  const SeccompProgram* seccomp;
  int nursery_lib;            // >= 0: the stub becomes the template's nursery mother
  char* const* interp_argv;   // a warm interpreter (or the mother) to exec, or null: wait for a job
  char* const* interp_envp;
  const char* interp_cwd;
  int keep_fds;               // fds 3 .. 3+keep_fds-1 stay open across the interpreter's exec
  const char* stage;          // how a failed interpreter exec is reported
  bool script_pipe = false;   // the interpreter is a shell zygote that reads its job's script
                              // from a pipe at kStubScriptFd (RuntimeInfo::shell)
};

[[noreturn]] void ExecInterpreter(const StubPlan& plan) {
  for (int fd = kStubSock; fd < kStubSock + plan.keep_fds; ++fd) {
    if (::fcntl(fd, F_SETFD, 0) != 0) StubFail(errno, "fds", 126);
  }
  if (plan.script_pipe) HandOverScriptPipe();
  if (::chdir(plan.interp_cwd) != 0) StubFail(errno, "cwd", 126);
  ::execve(plan.interp_argv[0], plan.interp_argv, plan.interp_envp);
  int err = errno;
  ::fcntl(kStubSock, F_SETFD, FD_CLOEXEC);
  StubFail(err, plan.stage, 127);
}

// Tries each candidate path, like execvp: a script without "#!" runs under /bin/sh, a
// permission problem is remembered while the search goes on past missing files.
[[noreturn]] void ExecJob(const ExecImage& img) {
  int first_err = ENOENT;
  const char* c = img.candidates;
  for (uint32_t i = 0; i < img.header->candidates; ++i, c += std::strlen(c) + 1) {
    ::execve(c, img.argv, img.envp);
    int err = errno;
    if (err == ENOEXEC) {
      char* saved = img.argv[0];
      img.argv[-1] = const_cast<char*>("/bin/sh");
      img.argv[0] = const_cast<char*>(c);
      ::execve("/bin/sh", img.argv - 1, img.envp);
      err = errno;
      img.argv[0] = saved;
    }
    if (err != ENOENT && err != ENOTDIR && first_err == ENOENT) first_err = err;
    if (err != ENOENT && err != ENOTDIR && err != EACCES) break;
  }
  StubFail(first_err, "exec", first_err == ENOENT ? 127 : 126);
}

// The stub without a warm interpreter: says it is ready, waits for the job's exec image, runs it.
[[noreturn]] void StubMain() {
  if (::write(kStubSock, &kStubReady, 1) != 1) ::_exit(125);
  uint32_t len = 0;
  ExecImageHeader h;
  if (!ReadFull(kStubSock, &len, sizeof len)) ::_exit(0);  // the keeper gave up on this sandbox
  if (len < sizeof h || !ReadFull(kStubSock, &h, sizeof h)) StubFail(EINVAL, "job", 126);
  if (h.argc > kMaxExecImageStrings || h.envc > kMaxExecImageStrings) StubFail(E2BIG, "job", 126);
  // The image and its pointer arrays in memory of the stub's own (init's heap is not ours).
  size_t nptrs = size_t{h.argc} + h.envc + 3;
  size_t ptr_bytes = nptrs * sizeof(char*);
  void* mem = ::mmap(nullptr, ptr_bytes + len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) StubFail(errno, "job", 126);
  auto** ptrs = static_cast<char**>(mem);
  char* body = static_cast<char*>(mem) + ptr_bytes;
  std::memcpy(body, &h, sizeof h);
  if (!ReadFull(kStubSock, body + sizeof h, len - sizeof h)) StubFail(EINVAL, "job", 126);
  ExecImage img;
  if (!MapExecImage(body, len, ptrs, nptrs, &img)) StubFail(EINVAL, "job", 126);

  int err = 0;
  if (h.cpu_time_ms > 0) {
    // SIGXCPU at the soft limit, SIGKILL a second later; the keeper also watches the cgroup.
    uint64_t s = (h.cpu_time_ms + 999) / 1000;
    err = SetLimit(RLIMIT_CPU, s, s + 1);
  }
  if (err == 0 && h.file_size_bytes > 0) err = SetLimit(RLIMIT_FSIZE, h.file_size_bytes, h.file_size_bytes);
  if (err == 0 && h.open_files > 0) err = SetLimit(RLIMIT_NOFILE, h.open_files, h.open_files);
  if (err != 0) StubFail(err, "rlimit", 126);
  if (::chdir(img.cwd) != 0) StubFail(errno, "cwd", 126);
  if (::write(kStubSock, &kStubStarting, 1) != 1) ::_exit(125);
  ExecJob(img);
}

// A template's nursery mother (nursery.h): fd 3 its socket to the keeper, fd 4 the nursery
// library. It stays sandbox root, with capabilities in the sandbox's user namespace only (it
// clones each job's namespaces and mounts its filesystems), and never runs job code: each job's
// process is a clone that drops everything first. Its filter (`plan.seccomp`, the nursery's
// mother filter) is the sandbox policy plus what making sandboxes takes (namespaces, mounts, a
// hostname); each job's process loads the job's filter over it.
[[noreturn]] void MotherMain(const StubPlan& plan) {
  if (::setsid() < 0) StubFail(errno, "setsid", 126);
  if (int err = SetLimit(RLIMIT_CORE, 1, 1)) StubFail(err, "rlimit", 126);
  if (int err = ResetSignals()) StubFail(err, "signals", 126);
  // The mother's filter (seccomp_policy.h, NurserySeccomp): loaded with CAP_SYS_ADMIN in the
  // sandbox's user namespace, so without no_new_privs.
  if (plan.seccomp != nullptr) {
    if (int e = LoadSeccompProgram(*plan.seccomp)) StubFail(e, "seccomp", 126);
  }
  ExecInterpreter(plan);
}

// The stub's first frame, on its own stack: from here on nothing returns into init's frames.
int StubEntry(void* arg) {
  const auto* plan = static_cast<const StubPlan*>(arg);
  for (int fd = 0; fd < 3; ++fd) {
    if (::dup2(6 + fd, fd) != fd) StubFail(errno, "stdio", 126);  // fd 5 (the socket) is not fd 3 yet
  }
  if (plan->nursery_lib >= 0) {
    const int keep[] = {5, plan->nursery_lib};
    if (ArrangeFds(keep, 2) != 0) ::_exit(126);
    MotherMain(*plan);
  }
  const int keep[] = {5};
  if (ArrangeFds(keep, 1) != 0) ::_exit(126);
  StubPrologue(*plan->config, plan->seccomp);
  if (plan->interp_argv != nullptr) ExecInterpreter(*plan);  // it says 'R' itself when it is ready
  StubMain();
}

// NULL-terminated pointer arrays over `strings` (which must outlive them).
std::vector<char*> CArray(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

void InitFail(const std::string& what) {
  std::string msg = "F" + what;
  (void)!::write(kStatusFd, msg.data(), msg.size());
  ::_exit(1);
}

void HandOverScriptPipe() {
  // Made after StubPrologue, so that it belongs to the job's uid, which may then open it anew
  // through /proc/self/fd (a shell sources a file by name). The stub keeps no copy of the write
  // end: the shell sees EOF once the keeper has written the script.
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) StubFail(errno, "script pipe", 126);
  if (p[0] == kStubScriptFd) {  // the lowest free fd (ArrangeFds left 0-3): already in place
    if (::fcntl(p[0], F_SETFD, 0) != 0) StubFail(errno, "script pipe", 126);
  } else {
    if (::dup3(p[0], kStubScriptFd, 0) != kStubScriptFd) StubFail(errno, "script pipe", 126);
    ::close(p[0]);
  }
  if (!SendWithFds(kStubSock, kStubScriptPipe, &p[1], 1).ok()) StubFail(errno, "script pipe", 126);
  ::close(p[1]);
}

namespace {

// InitFail without allocating (InitServe's: a nursery's init shares the mother's heap then).
[[noreturn]] void InitFailNoAlloc(const char* what, int err) {
  char buf[160];
  size_t n = 0;
  buf[n++] = 'F';
  for (const char* p = what; *p != '\0' && n < 100; ++p) buf[n++] = *p;
  if (err != 0) {
    buf[n++] = ':';
    buf[n++] = ' ';
    for (const char* p = strerrorname_np(err); p != nullptr && *p != '\0' && n < sizeof buf; ++p) buf[n++] = *p;
  }
  (void)!::write(kStatusFd, buf, n);
  ::_exit(1);
}

}  // namespace

int PlaceFds(const int* fds, int n, int first, int cloexec_from) {
  int moved[8];
  if (n > 8) return EINVAL;
  // Out of the way first, so that moving one into place cannot overwrite another.
  for (int i = 0; i < n; ++i) {
    moved[i] = ::fcntl(fds[i], F_DUPFD_CLOEXEC, 100);
    if (moved[i] < 0) return errno;
  }
  for (int i = 0; i < n; ++i) {
    const int to = first + i;
    if (::dup3(moved[i], to, to >= cloexec_from ? O_CLOEXEC : 0) != to) return errno;
  }
  return 0;
}

int ArrangeFds(const int* fds, int n) {
  if (int err = PlaceFds(fds, n, 3, 3)) return err;
  return sys::CloseFrom(static_cast<unsigned>(3 + n)) == 0 ? 0 : errno;
}

int ResetSignals() {
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    // SIGKILL and SIGSTOP cannot be changed; glibc keeps 32 and 33 for itself (and refuses them).
    if (sig == SIGKILL || sig == SIGSTOP || sig == 32 || sig == 33) continue;
    if (::sigaction(sig, &dfl, nullptr) != 0) return errno;
  }
  sigset_t none;
  sigemptyset(&none);
  return ::sigprocmask(SIG_SETMASK, &none, nullptr) == 0 ? 0 : errno;
}

void StubPrologue(const SandboxConfig& config, const SeccompProgram* seccomp, bool as_root) {
  if (::setsid() < 0) StubFail(errno, "setsid", 126);
  if (as_root) {
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) StubFail(errno, "privileges", 126);
  } else if (int err = DropPrivileges()) {
    StubFail(err, "privileges", 126);
  }
  // init is not dumpable; the job is, as it would be after an execve (a nursery's job runs
  // without one): its /proc/self files are its own (environ, ...). Nothing can ptrace it:
  // the filter below forbids ptrace to every process of the sandbox.
  if (::prctl(PR_SET_DUMPABLE, 1) != 0) StubFail(errno, "dumpable", 126);
  int err = SetLimit(RLIMIT_NOFILE, config.open_files, config.open_files);
  if (err == 0) err = SetLimit(RLIMIT_FSIZE, config.file_size_bytes, config.file_size_bytes);
  // 1, not 0: for a piped core_pattern (apport, systemd-coredump) the kernel ignores the limit
  // except the special value 1, and a 1-byte file limit writes no core file either.
  if (err == 0) err = SetLimit(RLIMIT_CORE, 1, 1);
  if (err == 0) err = SetLimit(RLIMIT_MEMLOCK, 64 << 10, 64 << 10);
  // A quarter of the stack limit is what execve takes for argv and the environment together:
  // 8 MiB leaves room for the protocol's 1 MiB of argv plus 256 KiB of environment. (Raising
  // the hard limit needs a privilege we no longer have; then the soft one goes as high as it may.)
  struct rlimit stack;
  if (err == 0 && ::getrlimit(RLIMIT_STACK, &stack) == 0 && stack.rlim_cur != RLIM_INFINITY &&
      stack.rlim_cur < (8u << 20)) {
    rlim_t want = stack.rlim_max == RLIM_INFINITY || stack.rlim_max >= (8u << 20) ? (8u << 20) : stack.rlim_max;
    err = SetLimit(RLIMIT_STACK, want, stack.rlim_max);
  }
  if (err != 0) StubFail(err, "rlimit", 126);
  if (int e = ResetSignals()) StubFail(e, "signals", 126);
  // The filter is the last thing set up, and it is loaded before the job arrives: loading it
  // costs ~0.1 ms, too much for the hot path. From here on only this stub's own code runs
  // (read the job, chdir, setrlimit, execve), all of it under the filter.
  if (seccomp != nullptr) {
    if (int e = LoadSeccompProgram(*seccomp)) StubFail(e, "seccomp", 126);
  }
}

void InitSetUp(const SandboxConfig& config, Status (*mount)(const SandboxConfig&)) {
  const int sync_fd = 3;
  char go;
  if (::read(sync_fd, &go, 1) != 1) ::_exit(1);  // the keeper died before writing our maps
  // Become sandbox root (host_id_base+2n): until now our host uid was still 0.
  if (::setresgid(0, 0, 0) != 0 || ::setresuid(0, 0, 0) != 0) InitFail("setresuid: " + std::string(std::strerror(errno)));
  if (::unshare(CLONE_NEWCGROUP) != 0) InitFail("unshare(CLONE_NEWCGROUP): " + std::string(std::strerror(errno)));
  // The parent-death signal is reset by credential changes, so it is set after them; if the
  // keeper is already gone, the sync pipe has hung up.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::prctl(PR_SET_DUMPABLE, 0) != 0) {
    InitFail("prctl: " + std::string(std::strerror(errno)));
  }
  struct pollfd p = {sync_fd, POLLIN, 0};
  if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR))) ::_exit(1);
  if (::sethostname(config.hostname.data(), config.hostname.size()) != 0) {
    InitFail("sethostname: " + std::string(std::strerror(errno)));
  }
  Status s = mount != nullptr ? mount(config) : MountSandboxFilesystems(config);
  if (!s.ok()) InitFail(s.message());
}

void InitServe(const SandboxConfig& config, pid_t stub) {
  if (stub < 0) InitFailNoAlloc("create stub", errno);
  // init keeps none of the job's fds (the pipes must reach EOF when the job's processes die)
  // and none of the host's (its stdio was the keeper's).
  int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) InitFailNoAlloc("open /dev/null", errno);
  for (int fd = 0; fd < 3; ++fd) ::dup2(devnull, fd);
  for (int fd = 5; fd <= 8; ++fd) ::close(fd);
  for (;;) {
    int st = 0;
    pid_t pid = ::waitpid(-1, &st, __WALL);
    if (pid < 0) {
      if (errno == EINTR) continue;
      InitFailNoAlloc("stub vanished", 0);
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
    char buf[kInitReportSize];
    EncodeInitReport(r, buf);
    (void)!::write(kStatusFd, buf, sizeof buf);
    ::_exit(0);  // the kernel now kills everything left in the pid namespace
  }
}

namespace {

// The stub of `plan`, cloned as the comment below says; its pid, or -1 with errno.
pid_t CloneStub(StubPlan* plan) {
  // The stub shares init's memory until it execs (CLONE_VM | CLONE_VFORK: init is suspended
  // meanwhile): no page tables are copied, no copy-on-write faults taken, no copy torn down at
  // the exec. Address-space work is what process creation costs most, on virtual machines by far
  // (here: a fork of a small process 0.86 ms, a vfork 0.025 ms). Its stack is its own.
#if SANDPOOL_ASAN
  // AddressSanitizer cannot follow a switch to another stack (it warns, into the job's stderr):
  // sanitizer builds fork the stub.
  pid_t stub = ::fork();
  if (stub == 0) StubEntry(plan);
  return stub;
#else
  constexpr size_t kStubStack = 256 << 10;
  void* stack = ::mmap(nullptr, kStubStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return -1;
  pid_t stub = ::clone(StubEntry, static_cast<char*>(stack) + kStubStack, CLONE_VM | CLONE_VFORK | SIGCHLD, plan);
  int err = errno;
  ::munmap(stack, kStubStack);
  errno = err;
  return stub;
#endif
}

// The stub of InitMain: `nursery_lib` >= 0 makes it the template's nursery mother.
pid_t LaunchStub(const SandboxConfig& config, const SeccompProgram* seccomp, const std::vector<std::string>& command,
                 int nursery_lib) {
  // Everything the stub will need, built now in init's memory.
  std::vector<std::string> interp = command, env = config.base_env;
  StubPlan plan{&config, seccomp, nursery_lib, nullptr, nullptr, "/work", 1, "zygote"};
  const RuntimeInfo* runtime = FindRuntime(config.runtime);
  if (nursery_lib >= 0) {
    plan.interp_cwd = "/";
    plan.keep_fds = 2;
    plan.stage = "mother";
    // A shell has no way to load a library, so the loader preloads it (nursery.h): the library's
    // constructor is the mother. Bound at once: every job's process would otherwise bind each
    // function it first calls, writing the shell's pages the mother never touched (about 10
    // copy-on-write faults a job). The mother takes both out of her environment before the shell
    // reads it (nursery_lib.cc).
    if (runtime != nullptr && runtime->shell) {
      env.push_back(kNurseryPreloadEnv);
      env.push_back(kNurseryBindNowEnv);
    }
  }
  std::vector<char*> interp_argv = CArray(interp), envp = CArray(env);
  if (!interp.empty()) {
    plan.interp_argv = interp_argv.data();
    plan.interp_envp = envp.data();
    plan.script_pipe = nursery_lib < 0 && runtime != nullptr && runtime->shell;
  }
  return CloneStub(&plan);
}

}  // namespace

void InitMain(const SandboxConfig& config, const SeccompProgram* seccomp, const std::vector<std::string>& command,
              int nursery_lib) {
  InitSetUp(config, nursery_lib >= 0 ? MountMotherFilesystems : nullptr);
  InitServe(config, LaunchStub(config, seccomp, command, nursery_lib));
}

namespace {

// The child of SpawnSandboxProcess, on its own stack, sharing the caller's memory.
int SandboxProcessEntry(void* arg) {
  const auto* spec = static_cast<const SandboxProcessSpec*>(arg);
  int n = spec->fds[4] >= 0 ? 5 : 4;
  if (PlaceFds(spec->fds, n, 0, 3) != 0) ::_exit(126);
  if (sys::CloseFrom(static_cast<unsigned>(n)) != 0) StubFail(errno, "fds", 126);
  StubPrologue(*spec->config, spec->seccomp, spec->as_root);
  if (spec->image != nullptr) {
    if (::chdir(spec->image->cwd) != 0) StubFail(errno, "cwd", 126);
    ExecJob(*spec->image);
  }
  StubPlan plan{spec->config, spec->seccomp, -1, spec->interp_argv, spec->interp_envp, spec->interp_cwd, n - 3,
                "interpreter"};
  ExecInterpreter(plan);
}

}  // namespace

pid_t SpawnSandboxProcess(const SandboxProcessSpec& spec) {
  const int sibling = spec.as_sibling ? CLONE_PARENT : 0;
  if (SANDPOOL_ASAN) {
    // fork(), or its CLONE_PARENT form (glibc's fork has none; this process has no threads).
    pid_t pid = sibling ? static_cast<pid_t>(::syscall(SYS_clone, sibling | SIGCHLD, nullptr, nullptr, nullptr, 0))
                        : ::fork();
    if (pid == 0) SandboxProcessEntry(const_cast<SandboxProcessSpec*>(&spec));
    return pid;
  }
  constexpr size_t kStack = 256 << 10;
  void* stack = ::mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return -1;
  pid_t pid = ::clone(SandboxProcessEntry, static_cast<char*>(stack) + kStack,
                      CLONE_VM | CLONE_VFORK | sibling | SIGCHLD, const_cast<SandboxProcessSpec*>(&spec));
  int err = errno;
  ::munmap(stack, kStack);
  errno = err;
  return pid;
}

}  // namespace sandpool
