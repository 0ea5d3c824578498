#include "worker/runners/nursery.h"
#include "worker/runners/nursery_mother.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/runtimes.h"
#include "common/syscalls.h"
#include "worker/ipc/messages.h"
#include "worker/runners/zygote.h"
#include "worker/sandbox/sandbox_init.h"

namespace sandpool {
namespace {

constexpr const char* kLibraryName = "libsandpool_nursery.so";

// The pid a pidfd refers to, in our pid namespace (the Pid: line of its fdinfo).
pid_t PidOfPidfd(int pidfd) {
  std::ifstream in("/proc/self/fdinfo/" + std::to_string(pidfd));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Pid:", 0) == 0) return static_cast<pid_t>(std::atol(line.c_str() + 4));
  }
  return -1;
}

Status SendWithFds(int sock, char tag, const int* fds, size_t n) {
  struct iovec iov = {&tag, 1};
  char control[CMSG_SPACE(sizeof(int) * 8)] = {};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * n);
  struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * n);
  std::memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
  ssize_t r;
  do {
    r = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (r < 0 && errno == EINTR);
  if (r != 1) return ErrnoStatus("send to nursery mother");
  return Status::Ok();
}

// One tag byte and at most one fd.
Status ReceiveWithFd(int sock, char* tag, UniqueFd* fd) {
  struct iovec iov = {tag, 1};
  char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t r;
  do {
    r = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return ErrnoStatus("receive from nursery mother");
  if (r == 0) return Status::Error("nursery mother closed its socket");
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int got;
      std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
      if (i == 0 && !*fd) fd->reset(got);
      else ::close(got);  // never more than we asked for
    }
  }
  return Status::Ok();
}

}  // namespace

UniqueFd OpenNurseryLibrary() {
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return UniqueFd();
  std::string dir(exe, static_cast<size_t>(n));
  dir = dir.substr(0, dir.rfind('/') + 1);
  // The build tree keeps it next to the binaries; `cmake --install` puts it in lib/sandpool.
  for (const std::string& path : {dir + kLibraryName, dir + "../lib/sandpool/" + kLibraryName}) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd) return fd;
  }
  return UniqueFd();
}

bool NurseryApplies(const SandboxConfig& config) {
  return config.runtime == "python" && config.root_dir.empty() && !config.layer_writable;
}

std::vector<std::string> NurseryMotherCommand() {
  std::vector<std::string> command = ZygoteCommand(*FindRuntime("python"));
  command.push_back("mother");
  return command;
}

std::string EncodeNurseryConfig(const SandboxConfig& c, const SeccompProgram& seccomp) {
  NurseryConfigMsg m;
  m.hostname = c.hostname;
  m.work_bytes = c.work_bytes;
  m.tmp_bytes = c.tmp_bytes;
  m.shm_bytes = c.shm_bytes;
  m.inodes = c.inodes;
  m.open_files = c.open_files;
  m.file_size_bytes = c.file_size_bytes;
  m.upper_bytes = c.upper_bytes;
  m.has_layer = !c.layer_host_dir.empty();
  m.layer_mount = c.layer_mount;
  m.bpf.assign(reinterpret_cast<const char*>(seccomp.filter.data()), seccomp.filter.size() * sizeof(struct sock_filter));
  return Encode(m);
}

Status DecodeNurseryConfig(std::string_view blob, SandboxConfig* c, SeccompProgram* seccomp) {
  NurseryConfigMsg m;
  SP_RETURN_IF_ERROR(Decode(blob, &m).Prefixed("nursery config"));
  if (m.bpf.size() % sizeof(struct sock_filter) != 0) return Status::Error("nursery config: bad bpf");
  c->hostname = m.hostname;
  c->work_bytes = m.work_bytes;
  c->tmp_bytes = m.tmp_bytes;
  c->shm_bytes = m.shm_bytes;
  c->inodes = m.inodes;
  c->open_files = m.open_files;
  c->file_size_bytes = m.file_size_bytes;
  c->upper_bytes = m.upper_bytes;
  // Inside the sandbox only whether there is a layer matters (the keeper mounted it).
  c->layer_host_dir = m.has_layer ? "(mounted by the keeper)" : "";
  c->layer_mount = m.layer_mount;
  seccomp->filter.resize(m.bpf.size() / sizeof(struct sock_filter));
  std::memcpy(seccomp->filter.data(), m.bpf.data(), m.bpf.size());
  c->runtime = "python";
  return Status::Ok();
}

Status SendNurseryConfig(int mother, const std::string& blob) {
  uint32_t len = static_cast<uint32_t>(blob.size());
  std::string framed = "C";
  framed.append(reinterpret_cast<const char*>(&len), sizeof len);
  framed += blob;
  return WriteAll(mother, framed.data(), framed.size()).Prefixed("nursery config");
}

Result<Sandbox> NurseryPrepareSandbox(int mother, SandboxCgroup cgroup) {
  auto fds = MakeSandboxFds();
  if (!fds.ok()) {
    (void)cgroup.Remove();
    return fds.status();
  }
  int raw[6];
  for (int i = 0; i < 6; ++i) raw[i] = fds->inside[i].get();
  Status sent = SendWithFds(mother, 'N', raw, 6);
  if (!sent.ok()) {
    (void)cgroup.Remove();
    return sent;
  }
  for (UniqueFd& f : fds->inside) f.reset();
  struct pollfd p = {mother, POLLIN, 0};
  int n;
  do {
    n = ::poll(&p, 1, 10000);
  } while (n < 0 && errno == EINTR);
  char tag = 0;
  UniqueFd pidfd;
  Status got = n == 0 ? Status::Error("nursery mother did not answer within 10 s") : ReceiveWithFd(mother, &tag, &pidfd);
  if (got.ok() && (tag != 'P' || !pidfd)) got = Status::Error(std::string("nursery mother could not clone a sandbox (") + tag + ")");
  if (!got.ok()) {
    (void)cgroup.Remove();
    return got;
  }
  Sandbox sb = std::move(fds->sb);
  sb.init_pid = PidOfPidfd(pidfd.get());
  sb.pidfd = std::move(pidfd);
  sb.cgroup = std::move(cgroup);
  if (sb.init_pid <= 0) {
    KillSandbox(sb);
    return Status::Error("nursery: no pid for the new sandbox's init");
  }
  return FinishSandbox(std::move(sb), "");
}

// ---- Inside the mother and its children (called through the library's C interface) ----

namespace {

// Decoded once, when the keeper sends the config; read by every init and job after that.
SandboxConfig g_config;
SeccompProgram g_seccomp;
bool g_configured = false;

// An init's stack. init shares the mother's memory (CLONE_VM), so its stack is the mother's
// memory too, and free again only once init has exited: the kernel then clears `word`
// (CLONE_CHILD_CLEARTID, which it does because the memory is shared) and wakes its futex.
//   word 0  free (init gone, or never used)
//   word 1  init is setting the sandbox up: the mother waits, since init allocates from the heap
//           they share
//   word 2  init has cloned the job and only reaps and reports from now on, with system calls
//           and no allocation: the mother may run again
struct InitStack {
  void* base = nullptr;
  int word = 0;
};
constexpr size_t kInitStackBytes = 128 << 10;
constexpr int kMaxInitStacks = 16;  // a slot has its running sandbox, its next one, and inits
                                    // still tearing down; more than this would be a leak
InitStack g_stacks[kMaxInitStacks];

InitStack* FreeInitStack() {
  for (InitStack& s : g_stacks) {
    if (__atomic_load_n(&s.word, __ATOMIC_ACQUIRE) != 0) continue;
    if (s.base == nullptr) {
      void* m = ::mmap(nullptr, kInitStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
      if (m == MAP_FAILED) return nullptr;
      s.base = m;
    }
    return &s;
  }
  return nullptr;
}

void FutexWaitWhile(int* word, int value) {
  while (__atomic_load_n(word, __ATOMIC_ACQUIRE) == value) {
    ::syscall(SYS_futex, word, FUTEX_WAIT, value, nullptr, nullptr, 0);  // EINTR, EAGAIN: look again
  }
}

// What init needs from the mother's frame; lives on the mother's stack while init may read it.
struct InitArgs {
  const int* fds;
  InitStack* stack;
  void** resume;  // the mother's __builtin_setjmp buffer: where the job continues
};

// init's first frame, on its own stack, in the mother's memory. Until it sets word 2 it may
// allocate (the mother is waiting); after that it must not (InitServe does not).
int InitEntry(void* arg) {
  const auto* a = static_cast<const InitArgs*>(arg);
  // The interpreter's handlers are the mother's, and would write into the interpreter's state.
  if (ResetSignals() != 0) ::_exit(126);
  if (ArrangeFds(a->fds, 6) != 0) ::_exit(126);  // its status pipe is not in place
  InitSetUp(g_config);
  // Under memory pressure the kernel is to kill the job, not the slot's mother (whose memory
  // counts in the same cgroup): init and the job make themselves the first choice.
  if (int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC); fd >= 0) {
    (void)!::write(fd, "1000", 4);
    ::close(fd);
  }
  // The job: the one copy of the interpreter's memory this sandbox makes. A raw clone, not
  // fork(): glibc's fork would run the interpreter's at-fork handlers in memory still shared.
  pid_t job = static_cast<pid_t>(::syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, 0));
  if (job == 0) {
    // A failure is the sandbox's: exiting before the zygote's 'R' fails its preparation.
    for (int fd = 0; fd < 3; ++fd) {
      if (::dup2(6 + fd, fd) != fd) ::_exit(126);
    }
    const int sock = 5;
    if (ArrangeFds(&sock, 1) != 0) ::_exit(126);
    StubPrologue(g_config, &g_seccomp);
    // Back into the mother's frame in sandpool_nursery_spawn, in this process's own copy of it,
    // which returns 0 there: the interpreter carries on as the job.
    __builtin_longjmp(a->resume, 1);
  }
  if (job < 0) InitFail("clone the job: " + std::string(std::strerror(errno)));
  __atomic_store_n(&a->stack->word, 2, __ATOMIC_RELEASE);
  ::syscall(SYS_futex, &a->stack->word, FUTEX_WAKE, 1, nullptr, nullptr, 0);
  InitServe(g_config, job);
}

}  // namespace

int NurseryConfigure(const char* blob, size_t len) {
  Status s = DecodeNurseryConfig(std::string_view(blob, len), &g_config, &g_seccomp);
  g_configured = s.ok();
  return g_configured ? 0 : -EINVAL;
}

// Not inlined: the jump buffer and the frame the job resumes in are this function's own.
__attribute__((noinline)) long NurserySpawn(const int* fds, int nfds, int sock) {
  if (nfds != 6 || !g_configured) return -EINVAL;
  InitStack* stack = FreeInitStack();
  if (stack == nullptr) return -EAGAIN;
  void* resume[5] = {};
  if (__builtin_setjmp(resume) != 0) return 0;  // the job, after its init cloned and confined it
  InitArgs args{fds, stack, resume};
  stack->word = 1;
  int pidfd = -1;
  // init shares our memory: no page tables are copied for it. The job, which init clones,
  // gets the only copy. Our caller holds the interpreter's lock and runs nothing until init
  // lets us go (word 2) or dies (word 0).
  long pid = ::clone(InitEntry, static_cast<char*>(stack->base) + kInitStackBytes,
                     CLONE_VM | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_PIDFD |
                         CLONE_CHILD_CLEARTID | SIGCHLD,
                     &args, &pidfd, nullptr, &stack->word);
  if (pid < 0) {
    int err = errno;
    stack->word = 0;
    return -err;
  }
  // The keeper attaches init to its cgroup and lets it go once it has the pidfd.
  Status sent = SendWithFds(sock, 'P', &pidfd, 1);
  // Nobody would ever let it go: it ends now (its exit clears the word).
  if (!sent.ok()) (void)sys::PidfdSendSignal(pidfd, SIGKILL);
  ::close(pidfd);
  FutexWaitWhile(&stack->word, 1);
  return pid;
}

}  // namespace sandpool
