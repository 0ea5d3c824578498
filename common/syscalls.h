// The raw system calls glibc 2.36 has no wrapper for, in one place (bubblewrap's utils.h does the
// same). Each is one syscall(2): async-signal-safe, no allocation, errno set on failure, so any of
// them may be used between clone and exec.
#pragma once

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>

namespace sandpool::sys {

// struct clone_args of clone3(2), spelled out: <linux/sched.h> clashes with <sched.h>.
struct CloneArgs {
  uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
      set_tid_size, cgroup;
};

// clone3 with `flags` (CLONE_NEW* and the like) plus CLONE_PIDFD, SIGCHLD at exit, no new stack:
// like fork, the child returns 0 on a copy of the caller's memory. Returns the child's pid (its
// pidfd in *pidfd), 0 in the child, -1 with errno on failure. Raw: no atfork handlers run and
// glibc's cached thread id is the parent's in the child, so the child must stay single-threaded,
// must not call raise() or abort(), and should exec or _exit.
inline long Clone3(uint64_t flags, int* pidfd) {
  CloneArgs args{};
  args.flags = flags | 0x00001000;  // CLONE_PIDFD
  args.pidfd = reinterpret_cast<uint64_t>(pidfd);
  args.exit_signal = 17;  // SIGCHLD
  return ::syscall(SYS_clone3, &args, sizeof args);
}

inline int PidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

// The leading fields of struct pidfd_info (<linux/pidfd.h>, kernel 6.13; glibc 2.36's headers
// predate it), and PIDFD_GET_INFO: _IOWR(0xFF, 11, struct pidfd_info), the 64-byte first version.
struct PidfdInfo {
  uint64_t mask, cgroupid;
  uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid, spare0;
};
static_assert(sizeof(PidfdInfo) == 64);
inline constexpr unsigned long kPidfdGetInfo = (3UL << 30) | (sizeof(PidfdInfo) << 16) | (0xFFUL << 8) | 11;
// The pid a pidfd refers to, in the caller's pid namespace: one ioctl, where /proc/self/fdinfo
// costs an open, a read and a close of procfs (about 9x the time). -1 with errno: ENOTTY or
// EINVAL before 6.13 (the caller falls back to fdinfo), ESRCH once the process is gone.
inline pid_t PidfdPid(int pidfd) {
  PidfdInfo info{};
  info.mask = 1;  // PIDFD_INFO_PID
  if (::syscall(SYS_ioctl, pidfd, kPidfdGetInfo, &info) != 0) return -1;
  return static_cast<pid_t>(info.pid);
}
inline int PidfdSendSignal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}
// Closes every fd from `first` up (CLOSE_RANGE, 5.9).
inline int CloseFrom(unsigned first) { return static_cast<int>(::syscall(SYS_close_range, first, ~0U, 0)); }
inline int PivotRoot(const char* new_root, const char* put_old) {
  return static_cast<int>(::syscall(SYS_pivot_root, new_root, put_old));
}
inline int OpenTree(int dirfd, const char* path, unsigned flags) {
  return static_cast<int>(::syscall(SYS_open_tree, dirfd, path, flags));
}
inline int MoveMount(int from_dirfd, const char* from, int to_dirfd, const char* to, unsigned flags) {
  return static_cast<int>(::syscall(SYS_move_mount, from_dirfd, from, to_dirfd, to, flags));
}
inline int MountSetattr(int dirfd, const char* path, unsigned flags, void* attr, size_t size) {
  return static_cast<int>(::syscall(SYS_mount_setattr, dirfd, path, flags, attr, size));
}
inline int Capset(void* header, void* data) { return static_cast<int>(::syscall(SYS_capset, header, data)); }

}  // namespace sandpool::sys
