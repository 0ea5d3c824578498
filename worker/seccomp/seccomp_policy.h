// The sandbox's seccomp policy: a default-deny allow-list of system calls for the native
// architecture, compiled once (in the keeper, before any sandbox exists) into a classic BPF
// program that the stub loads just before execve.
//
// What the policy does (the full, commented list is in seccomp_policy.cc):
//   - Any system call not on the allow-list fails with EPERM; a few newer calls that runtimes
//     probe and fall back from (clone3, landlock_*, ...) fail with ENOSYS instead, because the
//     fallback code only triggers on ENOSYS.
//   - Calls made through another architecture's entry point (i386 `int 0x80`, x32 numbers with
//     __X32_SYSCALL_BIT) kill the whole process with SIGSYS.
//   - clone with any CLONE_NEW* flag, ioctl TIOCSTI/TIOCLINUX, socket families other than
//     AF_UNIX/AF_INET/AF_INET6/NETLINK_ROUTE, personality changes and device-node mknod fail
//     with EPERM; the harmless forms of those calls are allowed.
// Supported native architectures: x86_64 and aarch64 (BuildSandboxSeccomp fails elsewhere).
#pragma once

#include <linux/filter.h>

#include <vector>

#include "common/status.h"

namespace sandpool {

// A compiled filter, ready for prctl(PR_SET_SECCOMP). Plain data: copy it, keep it for the life
// of the process, share it between sandboxes (it holds no fds or handles).
struct SeccompProgram {
  std::vector<struct sock_filter> filter;
};

// Builds the sandbox's filter with libseccomp and exports it to BPF in memory (through a memfd;
// nothing touches the file system). Deterministic; call it once and reuse the result. Not
// async-signal-safe (allocates). Errors: libseccomp refusing a rule, an unsupported native
// architecture, or a policy name that no supported architecture knows (a typo in the policy).
Result<SeccompProgram> BuildSandboxSeccomp();

// A nursery's policy as two stacked filters (the kernel runs every filter a process holds, and
// the strictest answer wins; for two errors, the newer filter's). `mother`: the sandbox policy
// that also allows what building a sandbox takes (mount, umount2, unshare, sethostname, clone
// with namespace flags); a nursery mother loads it once, and the inits and jobs she clones
// inherit it. `job`: refuses exactly those again (EPERM, as the sandbox policy) and allows the
// rest; each job's process loads it over the mother's instead of the whole policy. Together they
// answer every call as BuildSandboxSeccomp's program does (seccomp_test runs its cases against
// both), while the job's load, converted and compiled by the kernel at every load, is about a
// tenth of the size. Same errors as BuildSandboxSeccomp.
struct NurserySeccomp {
  SeccompProgram mother;
  SeccompProgram job;
};
Result<NurserySeccomp> BuildNurserySeccomp();

// Loads `p` into the calling thread with prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER). The caller
// must have set PR_SET_NO_NEW_PRIVS first (or hold CAP_SYS_ADMIN). Async-signal-safe: raw system
// calls only, no allocation, no logging; meant for a forked child just before execve.
// Returns 0 on success or an errno value (EINVAL for an empty or oversized program, EACCES when
// no_new_privs is missing, ...). errno itself may be changed.
int LoadSeccompProgram(const SeccompProgram& p);

}  // namespace sandpool
