#include "worker/ipc/fd_passing.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sandpool {

Status SendWithFds(int sock, char tag, const int* fds, size_t n) {
  struct iovec iov = {&tag, 1};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)] = {};
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
  if (r != 1) return ErrnoStatus("send with fds");
  return Status::Ok();
}

Status ReceiveWithFds(int sock, char* tag, int* fds, size_t max, size_t* got) {
  *got = 0;
  struct iovec iov = {tag, 1};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)] = {};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t r;
  do {
    r = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return ErrnoStatus("receive with fds");
  if (r == 0) return Status::Error("the other end closed its socket");
  ForEachReceivedFd(&msg, [&](int fd) {
    if (*got < max) fds[(*got)++] = fd;
    else ::close(fd);  // never more than we asked for
  });
  return Status::Ok();
}

Status ReceiveWithFd(int sock, char* tag, UniqueFd* fd) {
  int got_fd = -1;
  size_t got = 0;
  Status s = ReceiveWithFds(sock, tag, &got_fd, 1, &got);
  if (got == 1) fd->reset(got_fd);
  return s;
}

}  // namespace sandpool
