#include "common/fd.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/syscalls.h"

namespace sandpool {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) {
    // close() must not be retried on EINTR on Linux: the fd is gone either way.
    ::close(fd_);
  }
  fd_ = fd;
}

Result<PipePair> MakePipe(int extra_flags) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | extra_flags) != 0) return ErrnoStatus("pipe2");
  return PipePair{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

Result<SocketPair> MakeSocketPair(int type) {
  int fds[2];
  if (::socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, fds) != 0) return ErrnoStatus("socketpair");
  return SocketPair{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

Status SetNonBlocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return ErrnoStatus("fcntl(F_GETFL)");
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (::fcntl(fd, F_SETFL, flags) != 0) return ErrnoStatus("fcntl(F_SETFL)");
  return Status::Ok();
}

Status WriteAll(int fd, const void* data, size_t len) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write");
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status ReadExact(int fd, void* data, size_t len) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    ssize_t n = ::read(fd, p, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read");
    }
    if (n == 0) return Status::Error("read: unexpected end of file");
    p += n;
    len -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

pid_t PidfdPidFromFdinfo(int pidfd) {
  std::string path = "/proc/self/fdinfo/" + std::to_string(pidfd);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return 0;
  char buf[1024];
  ssize_t n;
  do {
    n = ::read(fd.get(), buf, sizeof buf - 1);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return 0;
  buf[n] = '\0';
  // A line "Pid:\t<pid>" (procfs, pidfd_show_fdinfo).
  for (const char* line = buf; line != nullptr && *line != '\0';) {
    if (std::strncmp(line, "Pid:", 4) == 0) return static_cast<pid_t>(std::atol(line + 4));
    line = std::strchr(line, '\n');
    if (line != nullptr) ++line;
  }
  return 0;
}

pid_t PidOfPidfd(int pidfd) {
  pid_t pid = sys::PidfdPid(pidfd);
  if (pid > 0) return pid;
  if (pid < 0 && errno == ESRCH) return -1;
  return PidfdPidFromFdinfo(pidfd);
}

}  // namespace sandpool
