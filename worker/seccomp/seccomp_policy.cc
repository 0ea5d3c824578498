// The sandbox's system-call policy. Read this file as the policy document: every group says why
// it is allowed or refused. The sandbox already runs in its own user, pid, mount, ipc, uts,
// cgroup and network namespaces, without capabilities and under rlimits; seccomp is the layer
// that shrinks the kernel surface itself (the calls that had the most privilege-escalation bugs:
// namespaces from inside, keyrings, eBPF, perf, userfaultfd, io_uring, module loading, ...).
//
// Rules of the policy:
//   - Default deny: anything not listed below fails with EPERM. A system call added to a future
//     kernel is therefore refused until someone decides about it here.
//   - Native architecture only. libseccomp adds the native arch; any other audit arch (i386
//     `int 0x80` on x86_64, arm32 on aarch64) and any x32 number (__X32_SYSCALL_BIT, which
//     libseccomp's x86_64 prologue checks) takes the bad-arch action: KILL_PROCESS.
//   - Names are resolved per architecture: a name the native arch does not have (open, fork,
//     arch_prctl on aarch64) is skipped; a name no supported arch knows is a policy typo and
//     makes BuildSandboxSeccomp fail.
//   - libseccomp refuses rules whose action equals the default, so the explicit deny list
//     (kDenied) is documentation plus a self-check that nothing on it was allowed by mistake.
#include "worker/seccomp/seccomp_policy.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/fd.h"

namespace sandpool {
namespace {

// ---------------------------------------------------------------------------------------------
// Allowed without conditions, grouped by what needs them.
// ---------------------------------------------------------------------------------------------

// Process life cycle, identity and scheduling. fork/vfork/execve are the point of the sandbox;
// the set*id/capset calls can only drop privilege (the stub holds no capabilities and the user
// namespace maps one uid); kill/tgkill reach only the sandbox's own pid namespace.
// clone is allowed further down with an argument filter; clone3 is ENOSYS (see kEnosys).
constexpr std::string_view kProcess[] = {
    "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid",
    "getpid", "getppid", "gettid", "getpgid", "setpgid", "getpgrp", "getsid", "setsid",
    "set_tid_address", "set_robust_list", "get_robust_list", "rseq", "restart_syscall",
    "arch_prctl", "prctl", "seccomp",  // prctl/seccomp: more filters can only restrict further
    "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups",
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups",
    "setfsuid", "setfsgid", "capget", "capset",
    "getpriority", "setpriority", "ioprio_get", "ioprio_set",
    "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam",
    "sched_setparam", "sched_getscheduler", "sched_setscheduler", "sched_getattr",
    "sched_setattr", "sched_get_priority_max", "sched_get_priority_min",
    "sched_rr_get_interval", "getcpu",
    "getrlimit", "setrlimit", "prlimit64",  // raising a hard limit needs CAP_SYS_RESOURCE
    "getrusage", "times", "uname", "sysinfo", "umask",
    "getrandom",  // Node asserts at start-up that its CSPRNG works; Python seeds hashes from it
    "pidfd_open", "pidfd_send_signal",  // Python's asyncio child watcher, subprocess
};

// Signals. Delivery is confined by the pid namespace.
constexpr std::string_view kSignals[] = {
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait",
    "rt_sigqueueinfo", "rt_tgsigqueueinfo", "rt_sigsuspend", "sigaltstack",
    "kill", "tkill", "tgkill", "pause", "alarm",
};

// Memory. mlock is bounded by RLIMIT_MEMLOCK, everything else by the cgroup. pkey_* and
// membarrier are used by V8; memfd_create by Node and Python's multiprocessing.
constexpr std::string_view kMemory[] = {
    "brk", "mmap", "munmap", "mprotect", "mremap", "madvise", "msync", "mincore",
    "remap_file_pages", "mlock", "mlock2", "munlock", "mlockall", "munlockall",
    "membarrier", "pkey_alloc", "pkey_free", "pkey_mprotect", "memfd_create",
    "get_mempolicy",  // read-only; numa-aware allocators ask, setting it is refused
};

// Threads and synchronisation.
constexpr std::string_view kSync[] = {"futex", "futex_waitv"};

// Time: reading clocks, sleeping, timers. Setting any clock is refused (kDenied).
constexpr std::string_view kTime[] = {
    "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time",
    "getitimer", "setitimer", "timer_create", "timer_settime", "timer_gettime",
    "timer_getoverrun", "timer_delete", "timerfd_create", "timerfd_settime", "timerfd_gettime",
};

// File descriptors and plain I/O.
constexpr std::string_view kFdIo[] = {
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2",
    "pwritev2", "lseek", "close", "close_range", "dup", "dup2", "dup3", "fcntl", "flock",
    "pipe", "pipe2", "sendfile", "splice", "tee", "vmsplice", "copy_file_range",
    "fsync", "fdatasync", "sync", "syncfs", "sync_file_range", "fallocate", "ftruncate",
    "truncate", "fadvise64", "readahead",
};

// Event multiplexing (libuv, asyncio, bash's job control).
constexpr std::string_view kEvents[] = {
    "select", "pselect6", "poll", "ppoll", "epoll_create", "epoll_create1", "epoll_ctl",
    "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "signalfd",
    "signalfd4", "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
};

// File system. Paths resolve inside the sandbox's private mount namespace over a read-only
// root; what is writable is decided by the mounts, not here. mknod is filtered (below).
constexpr std::string_view kFiles[] = {
    "open", "openat", "openat2", "creat", "stat", "fstat", "lstat", "newfstatat", "statx",
    "statfs", "fstatfs", "access", "faccessat", "faccessat2", "readlink", "readlinkat",
    "getdents", "getdents64", "getcwd", "chdir", "fchdir", "mkdir", "mkdirat", "rmdir",
    "unlink", "unlinkat", "rename", "renameat", "renameat2", "link", "linkat", "symlink",
    "symlinkat", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown",
    "fchownat", "utime", "utimes", "futimesat", "utimensat",
    "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
    "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
};

// Sockets, once created (creation is filtered by family below). The network namespace has
// only loopback, so these reach nothing outside the sandbox unless policy grants egress.
constexpr std::string_view kSockets[] = {
    "bind", "connect", "listen", "accept", "accept4", "getsockname", "getpeername",
    "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "shutdown",
    "setsockopt", "getsockopt",
};

// System V and POSIX IPC: private to the sandbox's IPC namespace, which dies with it.
constexpr std::string_view kIpc[] = {
    "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl",
    "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend",
    "mq_timedreceive", "mq_notify", "mq_getsetattr",
};

constexpr std::span<const std::string_view> kAllowGroups[] = {
    kProcess, kSignals, kMemory, kSync, kTime, kFdIo, kEvents, kFiles, kSockets, kIpc,
};

// ---------------------------------------------------------------------------------------------
// ENOSYS instead of EPERM: calls whose users fall back to an older call only when the kernel
// says "not implemented". glibc >= 2.34 tries clone3 for pthread_create/posix_spawn and uses
// clone only after ENOSYS; clone3 cannot be argument-filtered (its flags live in memory), so
// refusing it is how CLONE_NEW* stays closed. landlock: sandboxing tools treat ENOSYS as "no
// Landlock here" and carry on, while EPERM would look like a failure.
// ---------------------------------------------------------------------------------------------
constexpr std::string_view kEnosys[] = {
    "clone3", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
};

// ---------------------------------------------------------------------------------------------
// Refused (EPERM through the default action). Listed so the intent is reviewable and so the
// build fails if one of them is ever allowed by mistake. Anything else unlisted is refused too.
// ---------------------------------------------------------------------------------------------
constexpr std::string_view kDenied[] = {
    // Mounts and namespaces: the sandbox's view of the system is fixed before exec.
    "mount", "umount2", "pivot_root", "chroot", "setns", "unshare", "open_tree", "move_mount",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    // Kernel keyrings: shared kernel state with a long CVE history, not namespaced well.
    "keyctl", "add_key", "request_key",
    // eBPF, perf, userfaultfd, io_uring: the largest sources of kernel exploits in recent years.
    // libuv (Node) falls back to its thread pool when io_uring_setup fails.
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register",
    // Legacy AIO: a host-wide pool (fs.aio-max-nr) a job could drain; no target runtime uses it.
    "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
    // Loading or replacing the kernel, rebooting, swap, accounting, quotas, the kernel log.
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
    "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog",
    // File handles bypass path-based confinement (the "shocker" container escape).
    "open_by_handle_at", "name_to_handle_at",
    // Clocks are host-wide.
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    // Looking into or moving other processes' memory and files.
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    "process_madvise", "process_mrelease",
    // NUMA placement of memory is a host resource decision.
    "mbind", "set_mempolicy", "set_mempolicy_home_node", "migrate_pages", "move_pages",
    // Host hardware and odd legacy interfaces.
    "iopl", "ioperm", "modify_ldt", "vhangup", "uselib", "ustat", "sysfs", "_sysctl",
    "lookup_dcookie", "fanotify_init", "fanotify_mark", "sethostname", "setdomainname",
    "memfd_secret", "cachestat",
};

// ---------------------------------------------------------------------------------------------
// A nursery's mother and the inits she clones build sandboxes: they make namespaces, mount the
// sandbox's file systems and name it. These (all refused above, and for clone its namespace
// flags) are what the mother's filter allows and the job's small filter refuses again
// (BuildNurserySeccomp). Nothing else differs between the two stacks and the sandbox policy.
// ---------------------------------------------------------------------------------------------
constexpr std::string_view kSandboxMaking[] = {"mount", "umount2", "unshare", "sethostname"};

// clone's flags that make namespaces. CLONE_NEWTIME is not listed: in clone() that bit is part of
// the exit signal (CSIGNAL); only clone3/unshare, both refused, take it as a flag.
constexpr uint64_t kNamespaceFlags = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC |
                                     CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET;

struct FilterCtxDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};
using FilterCtx = std::unique_ptr<void, FilterCtxDeleter>;

Status SeccompError(std::string_view what, int rc) {
  // libseccomp returns -errno.
  return ErrnoStatus(std::string("seccomp: ") + std::string(what), -rc);
}

// The native number of `name`, or -1 when the native arch lacks it (skip the rule). A name that
// no supported arch knows is an error: it is a typo in the policy, not a portability gap.
Result<int> Resolve(std::string_view name) {
  std::string n(name);
  int nr = seccomp_syscall_resolve_name(n.c_str());
  if (nr >= 0) return nr;
  if (seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, n.c_str()) >= 0 ||
      seccomp_syscall_resolve_name_arch(SCMP_ARCH_AARCH64, n.c_str()) >= 0) {
    return -1;
  }
  return Status::Error("seccomp: unknown system call in policy: " + n);
}

// Every comparison below masks argument values to their low 32 bits where the kernel declares
// the parameter as int/unsigned int: the kernel ignores the upper half, so a filter comparing all
// 64 bits could be bypassed by setting high bits (CVE-2019-10063 did this with TIOCSTI).
constexpr uint64_t kLow32 = 0xffffffffULL;

scmp_arg_cmp MaskedEq(unsigned arg, uint64_t mask, uint64_t value) {
  return scmp_arg_cmp{arg, SCMP_CMP_MASKED_EQ, mask, value};
}

Status AddRule(scmp_filter_ctx ctx, uint32_t action, std::string_view name,
               std::initializer_list<scmp_arg_cmp> args) {
  Result<int> nr = Resolve(name);
  if (!nr.ok()) return nr.status();
  if (*nr < 0) return Status::Ok();
  int rc = seccomp_rule_add_array(ctx, action, *nr, static_cast<unsigned>(args.size()),
                                  args.size() ? args.begin() : nullptr);
  if (rc != 0) return SeccompError("rule for " + std::string(name), rc);
  return Status::Ok();
}

// Collects (mask, value) pairs over the low 32 bits that together match every value except
// those in `excluded`: walk the binary trie of values from the top bit; a subtree holding no
// excluded value becomes one masked comparison. At most 32 pairs per excluded value.
void CoverAllExcept(uint32_t prefix, int bits, const std::vector<uint32_t>& excluded,
                    std::vector<std::pair<uint32_t, uint32_t>>* out) {
  if (excluded.empty()) {
    uint32_t mask = bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
    out->emplace_back(mask, prefix);
    return;
  }
  if (bits == 32) return;  // this exact value is excluded
  const int bit = 31 - bits;
  for (uint32_t b : {0u, 1u}) {
    std::vector<uint32_t> sub;
    for (uint32_t v : excluded) {
      if (((v >> bit) & 1u) == b) sub.push_back(v);
    }
    CoverAllExcept(prefix | (b << bit), bits + 1, sub, out);
  }
}

// Allows `name` whenever the low 32 bits of argument `arg` are not one of `excluded` (the upper
// half is ignored, as the kernel ignores it for an unsigned int parameter). libseccomp cannot say
// "allow, except these values" when the exception's action (EPERM) equals the default action,
// and it allows only one comparison per argument in a rule, so the allowed set is spelled out as
// disjoint masked comparisons, one rule each.
Status AllowAllExcept(scmp_filter_ctx ctx, std::string_view name, unsigned arg,
                      const std::vector<uint32_t>& excluded) {
  std::vector<std::pair<uint32_t, uint32_t>> cover;
  CoverAllExcept(0, 0, excluded, &cover);
  for (const auto& [mask, value] : cover) {
    SP_RETURN_IF_ERROR(AddRule(ctx, SCMP_ACT_ALLOW, name, {MaskedEq(arg, mask, value)}));
  }
  return Status::Ok();
}

// `mother`: the nursery mother's form (BuildNurserySeccomp): clone with any flags.
Status AddConditionalRules(scmp_filter_ctx ctx, bool mother) {
  // clone: fork and pthread_create need it; new namespaces from inside do not. The flags are an
  // unsigned long (all 64 bits count).
  SP_RETURN_IF_ERROR(mother ? AddRule(ctx, SCMP_ACT_ALLOW, "clone", {})
                            : AddRule(ctx, SCMP_ACT_ALLOW, "clone", {MaskedEq(0, kNamespaceFlags, 0)}));

  // ioctl: terminals and files need dozens of commands (TCGETS, TIOCGWINSZ, FIONREAD, ...).
  // TIOCSTI pushes input into a terminal (a classic escape when a terminal is shared); TIOCLINUX
  // can do the same on a virtual console. Everything else is allowed.
  SP_RETURN_IF_ERROR(AllowAllExcept(ctx, "ioctl", 1,
                                    {static_cast<uint32_t>(TIOCSTI),
                                     static_cast<uint32_t>(TIOCLINUX)}));

  // personality: runtimes query it (0xffffffff) or set PER_LINUX; other personas change the
  // address-space layout (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC) and have been exploit aids.
  SP_RETURN_IF_ERROR(AddRule(ctx, SCMP_ACT_ALLOW, "personality", {MaskedEq(0, kLow32, 0)}));
  SP_RETURN_IF_ERROR(
      AddRule(ctx, SCMP_ACT_ALLOW, "personality", {MaskedEq(0, kLow32, 0xffffffffULL)}));

  // socket: local and IP sockets; netlink only for NETLINK_ROUTE in the sandbox's own network
  // namespace (getifaddrs, Node's os.networkInterfaces, `ip addr`). Refused: AF_PACKET,
  // AF_VSOCK, AF_KEY, AF_ALG, Bluetooth, other netlink protocols (audit, netfilter, ...).
  for (int family : {AF_UNIX, AF_INET, AF_INET6}) {
    SP_RETURN_IF_ERROR(AddRule(ctx, SCMP_ACT_ALLOW, "socket",
                               {MaskedEq(0, kLow32, static_cast<uint64_t>(family))}));
  }
  SP_RETURN_IF_ERROR(AddRule(ctx, SCMP_ACT_ALLOW, "socket",
                             {MaskedEq(0, kLow32, AF_NETLINK), MaskedEq(2, kLow32, NETLINK_ROUTE)}));
  SP_RETURN_IF_ERROR(
      AddRule(ctx, SCMP_ACT_ALLOW, "socketpair", {MaskedEq(0, kLow32, AF_UNIX)}));

  // mknod: FIFOs (mkfifo), sockets and regular files yes; device nodes no (the user namespace
  // already stops them; this keeps it true if the mapping ever changes).
  for (uint64_t type : {uint64_t{0}, uint64_t{S_IFREG}, uint64_t{S_IFIFO}, uint64_t{S_IFSOCK}}) {
    SP_RETURN_IF_ERROR(AddRule(ctx, SCMP_ACT_ALLOW, "mknod", {MaskedEq(1, S_IFMT, type)}));
    SP_RETURN_IF_ERROR(AddRule(ctx, SCMP_ACT_ALLOW, "mknodat", {MaskedEq(2, S_IFMT, type)}));
  }
  return Status::Ok();
}

// Fails when a name appears on two lists (allowed and denied, or allowed twice): the lists are
// the policy document, so a contradiction in them is a bug even if libseccomp would accept it.
Status CheckListsDisjoint() {
  std::vector<std::string_view> seen;
  auto add = [&seen](std::string_view n) -> Status {
    for (std::string_view s : seen) {
      if (s == n) return Status::Error("seccomp: policy lists " + std::string(n) + " twice");
    }
    seen.push_back(n);
    return Status::Ok();
  };
  for (auto group : kAllowGroups) {
    for (std::string_view n : group) SP_RETURN_IF_ERROR(add(n));
  }
  for (std::string_view n : kEnosys) SP_RETURN_IF_ERROR(add(n));
  for (std::string_view n : kDenied) SP_RETURN_IF_ERROR(add(n));
  for (std::string_view n : {"clone", "ioctl", "personality", "socket", "socketpair", "mknod",
                             "mknodat"}) {
    SP_RETURN_IF_ERROR(add(n));
  }
  return Status::Ok();
}

Result<SeccompProgram> Export(scmp_filter_ctx ctx) {
  UniqueFd mem(memfd_create("sandpool-seccomp", MFD_CLOEXEC));
  if (!mem) return ErrnoStatus("seccomp: memfd_create");
  int rc = seccomp_export_bpf(ctx, mem.get());
  if (rc != 0) return SeccompError("export_bpf", rc);
  off_t size = lseek(mem.get(), 0, SEEK_END);
  if (size < 0) return ErrnoStatus("seccomp: lseek");
  const size_t n = static_cast<size_t>(size) / sizeof(struct sock_filter);
  if (n == 0 || n * sizeof(struct sock_filter) != static_cast<size_t>(size) || n > BPF_MAXINSNS) {
    return Status::Error("seccomp: exported program has a bad size: " + std::to_string(size));
  }
  if (lseek(mem.get(), 0, SEEK_SET) != 0) return ErrnoStatus("seccomp: lseek");
  SeccompProgram prog;
  prog.filter.resize(n);
  SP_RETURN_IF_ERROR(ReadExact(mem.get(), prog.filter.data(), static_cast<size_t>(size)));
  return prog;
}

// A new filter context on the native architecture: other architectures' entry points kill the
// process; `default_action` answers every call no rule names.
Result<FilterCtx> NewFilter(uint32_t default_action) {
  const uint32_t arch = seccomp_arch_native();
  if (arch != SCMP_ARCH_X86_64 && arch != SCMP_ARCH_AARCH64) {
    return Status::Error("seccomp: unsupported native architecture");
  }
  FilterCtx ctx(seccomp_init(default_action));
  if (!ctx) return Status::Error("seccomp: seccomp_init failed");
  int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  if (rc != 0) return SeccompError("set bad-arch action", rc);
  return ctx;
}

// The sandbox policy, or (`mother`) the same with kSandboxMaking and namespace clones allowed.
Result<SeccompProgram> BuildPolicy(bool mother) {
  SP_RETURN_IF_ERROR(CheckListsDisjoint());
  Result<FilterCtx> ctx = NewFilter(SCMP_ACT_ERRNO(EPERM));
  if (!ctx.ok()) return ctx.status();
  scmp_filter_ctx c = ctx->get();
  // A binary tree over syscall numbers: ~8 comparisons to reach any of ~300 rules instead of a
  // linear scan. The program is built once; its run time is paid on every system call.
  int rc = seccomp_attr_set(c, SCMP_FLTATR_CTL_OPTIMIZE, 2);
  if (rc != 0) return SeccompError("set optimize", rc);

  for (auto group : kAllowGroups) {
    for (std::string_view name : group) SP_RETURN_IF_ERROR(AddRule(c, SCMP_ACT_ALLOW, name, {}));
  }
  for (std::string_view name : kEnosys) {
    SP_RETURN_IF_ERROR(AddRule(c, SCMP_ACT_ERRNO(ENOSYS), name, {}));
  }
  for (std::string_view name : kDenied) {
    // Resolving is the check: a typo in the deny list would otherwise go unnoticed.
    Result<int> nr = Resolve(name);
    if (!nr.ok()) return nr.status();
  }
  if (mother) {
    for (std::string_view name : kSandboxMaking) SP_RETURN_IF_ERROR(AddRule(c, SCMP_ACT_ALLOW, name, {}));
  }
  SP_RETURN_IF_ERROR(AddConditionalRules(c, mother));
  return Export(c);
}

// What a job under the mother's filter loads: refuses again, as the sandbox policy does (its
// default action, EPERM), exactly what the mother's allows beyond it; allows everything else,
// which the mother's filter below it decides.
Result<SeccompProgram> BuildJobOverMother() {
  for (std::string_view name : kSandboxMaking) {
    if (std::find(std::begin(kDenied), std::end(kDenied), name) == std::end(kDenied)) {
      return Status::Error("seccomp: " + std::string(name) + " is allowed to mothers but not refused to jobs");
    }
  }
  Result<FilterCtx> ctx = NewFilter(SCMP_ACT_ALLOW);
  if (!ctx.ok()) return ctx.status();
  scmp_filter_ctx c = ctx->get();
  for (std::string_view name : kSandboxMaking) SP_RETURN_IF_ERROR(AddRule(c, SCMP_ACT_ERRNO(EPERM), name, {}));
  // One rule per flag: a rule compares each argument once, and any one of them is refused.
  for (uint64_t flag = 1; flag != 0; flag <<= 1) {
    if ((kNamespaceFlags & flag) != 0) {
      SP_RETURN_IF_ERROR(AddRule(c, SCMP_ACT_ERRNO(EPERM), "clone", {MaskedEq(0, flag, flag)}));
    }
  }
  return Export(c);
}

}  // namespace

Result<SeccompProgram> BuildSandboxSeccomp() { return BuildPolicy(false); }

Result<NurserySeccomp> BuildNurserySeccomp() {
  Result<SeccompProgram> mother = BuildPolicy(true);
  if (!mother.ok()) return mother.status();
  Result<SeccompProgram> job = BuildJobOverMother();
  if (!job.ok()) return job.status();
  return NurserySeccomp{std::move(mother).value(), std::move(job).value()};
}

int LoadSeccompProgram(const SeccompProgram& p) {
  if (p.filter.empty() || p.filter.size() > BPF_MAXINSNS) return EINVAL;
  struct sock_fprog prog;
  prog.len = static_cast<unsigned short>(p.filter.size());
  // The kernel copies the program; it never writes through this pointer.
  prog.filter = const_cast<struct sock_filter*>(p.filter.data());
  if (syscall(SYS_prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) return errno;
  return 0;
}

}  // namespace sandpool
