// The nursery's mother side (nursery_mother.h): runs inside the sandbox, in the mother and its
// children, called through libsandpool_nursery.so's C interface (nursery_lib.cc).
#include "worker/runners/nursery_mother.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/syscalls.h"
#include "worker/runners/nursery_wire.h"
#include "worker/runners/zygote.h"
#include "worker/sandbox/sandbox_init.h"

namespace sandpool {

namespace {

// Decoded once, when the keeper sends the config; read by every init and job after that.
// Made on first use and never destroyed, not static objects: a shell mother serves from the
// library's constructor (nursery_lib.cc), which runs before the library's static initializers
// would have, and a job's process should not destroy her state when it exits.
SandboxConfig& Config() {
  static SandboxConfig* config = new SandboxConfig;
  return *config;
}
SeccompProgram& Seccomp() {
  static SeccompProgram* seccomp = new SeccompProgram;
  return *seccomp;
}
// A shell template's mother (nursery_lib.cc): her job's process hands the keeper its script pipe.
bool g_shell = false;

void Configure() {
  const RuntimeInfo* r = TemplateRuntime(Config().runtime);
  g_shell = r != nullptr && r->shell;
}

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
  InitSetUp(Config());
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
    StubPrologue(Config(), &Seccomp());
    if (g_shell) {
      // What the stub does before it execs a warm shell (sandbox_init.cc): the script pipe, and
      // the shell starts in /work (the zygote then changes to the job's directory).
      HandOverScriptPipe();
      if (::chdir("/work") != 0) ::_exit(126);
    }
    // The OOM killer's first choice in the sandbox: at the same setting it would take init,
    // whose resident size is the mother's (it shares her memory), and with it the mother. This
    // process has its own memory now and is dumpable (StubPrologue), so the setting is its own.
    // A shell's zygote script sets it first thing (zygote.cc, kShellZygote), as it does in a
    // sandbox the keeper made: not twice per job.
    if (int fd = g_shell ? -1 : ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC); fd >= 0) {
      (void)!::write(fd, "1000", 4);
      ::close(fd);
    }
    // Back into the mother's frame in NurserySpawn, in this process's own copy of it, which
    // returns 0 there and from NurseryServe: the interpreter carries on as the job.
    __builtin_longjmp(a->resume, 1);
  }
  if (job < 0) InitFail("clone the job: " + std::string(std::strerror(errno)));
  __atomic_store_n(&a->stack->word, 2, __ATOMIC_RELEASE);
  ::syscall(SYS_futex, &a->stack->word, FUTEX_WAKE, 1, nullptr, nullptr, 0);
  InitServe(Config(), job);
}

// The keeper's config blob (nursery_wire.h), decoded once; 0 or -EINVAL.
int NurseryConfigure(const char* blob, size_t len) {
  Status s = DecodeNurseryConfig(std::string_view(blob, len), &Config(), &Seccomp());
  if (!s.ok()) return -EINVAL;
  Configure();
  return 0;
}

// The keeper's 'C' message (nursery.h): a u32 length and the config; whether it was taken.
bool ReceiveConfig(int sock) {
  char head[5];
  if (!ReadExact(sock, head, sizeof head).ok() || head[0] != 'C') return false;
  uint32_t len = 0;
  std::memcpy(&len, head + 1, sizeof len);
  if (len > (64u << 20)) return false;
  std::string blob(len, '\0');
  return ReadExact(sock, blob.data(), len).ok() && NurseryConfigure(blob.data(), len) == 0;
}

// Makes one sandbox from the keeper's six fds (nursery_mother.h, NurseryServe, which calls it only
// once configured): returns init's pid in the mother, 0 in the job's process, -errno on failure.
// Not inlined: the jump buffer and the frame the job resumes in are this function's own.
__attribute__((noinline)) long NurserySpawn(const int (&fds)[6], int sock) {
  InitStack* stack = FreeInitStack();
  if (stack == nullptr) return -EAGAIN;
  void* resume[5] = {};
  if (__builtin_setjmp(resume) != 0) return 0;  // the job, after its init cloned and confined it
  InitArgs args{fds, stack, resume};
  stack->word = 1;
  int pidfd = -1;
  // init shares our memory: no page tables are copied for it. The job, which init clones,
  // gets the only copy. The mother (a python mother holds the interpreter's lock throughout
  // NurseryServe) runs nothing until init lets her go (word 2) or dies (word 0).
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

}  // namespace

long NurseryServe(int sock) {
  // Children (the sandboxes' inits) are released by the kernel as they end, not reaped here
  // (SIGCHLD ignored): an init that exits leaves its cgroup and the slot at once, where a reap
  // by the mother waited for her to be scheduled, and the keeper, which waits for the cgroup to
  // empty before the slot's next sandbox, polled for it (about twice a job). Their stacks are
  // free again when the kernel clears the word (CLONE_CHILD_CLEARTID), which does not wait for
  // a reap. init and the job's process reset every disposition (ResetSignals) first thing.
  struct sigaction sa = {};
  sa.sa_handler = SIG_IGN;
  if (::sigaction(SIGCHLD, &sa, nullptr) != 0) return -errno;
  if (!ReceiveConfig(sock)) return -EINVAL;
  for (;;) {
    struct pollfd p = {sock, POLLIN, 0};
    if (::poll(&p, 1, -1) <= 0) continue;  // EINTR
    char tag = 0;
    int fds[6];
    size_t got = 0;
    if (!ReceiveWithFds(sock, &tag, fds, 6, &got).ok()) return -EPIPE;  // the keeper is gone
    long pid = tag == 'N' && got == 6 ? NurserySpawn(fds, sock) : -EINVAL;  // sends 'P' itself
    if (pid == 0) return 0;  // the job's process, confined (its fds are already its own)
    for (size_t i = 0; i < got; ++i) ::close(fds[i]);
    if (pid < 0) (void)!::write(sock, "E", 1);
  }
}

}  // namespace sandpool
