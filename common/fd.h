// UniqueFd: the only owner of a file descriptor. Move-only; closes on destruction; release()
// hands the raw fd to a new owner. No code outside this type calls close() on an fd it owns.
// Every fd the project opens is O_CLOEXEC (or SOCK_CLOEXEC / MSG_CMSG_CLOEXEC), so nothing
// leaks into a sandbox through exec.
#pragma once

#include <sys/types.h>

#include <utility>

#include "common/status.h"

namespace sandpool {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }
  int release() { return std::exchange(fd_, -1); }
  // Closes the current fd (if any) and takes ownership of `fd`.
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct PipePair {
  UniqueFd read;
  UniqueFd write;
};

// pipe2(O_CLOEXEC | extra_flags).
Result<PipePair> MakePipe(int extra_flags = 0);

struct SocketPair {
  UniqueFd a;
  UniqueFd b;
};

// socketpair(AF_UNIX, type | SOCK_CLOEXEC).
Result<SocketPair> MakeSocketPair(int type);

Status SetNonBlocking(int fd, bool on = true);

// Writes all of `len` bytes, retrying on EINTR and short writes (blocking fds only).
Status WriteAll(int fd, const void* data, size_t len);
// Reads exactly `len` bytes; an early EOF is an error whose sys_errno() is 0.
Status ReadExact(int fd, void* data, size_t len);

// The pid a pidfd refers to, in our pid namespace: PIDFD_GET_INFO (sys::PidfdPid), or where the
// kernel has none (before 6.13) the Pid: line of its fdinfo (PidfdPidFromFdinfo). -1 once the
// process is gone. Allocates: not for use between fork and exec.
pid_t PidOfPidfd(int pidfd);
// The Pid: line of /proc/self/fdinfo/<pidfd>: -1 for a process that is gone, 0 when there is
// none (not a pidfd, or procfs unreadable).
pid_t PidfdPidFromFdinfo(int pidfd);

}  // namespace sandpool
