// One tag byte with file descriptors attached (SCM_RIGHTS) over a unix socket: how the keeper and
// a nursery mother exchange a sandbox's fds (worker/runners/nursery.h), and how a shell stub hands
// the keeper its script pipe (stub_protocol.h, kStubScriptPipe). On success they make system
// calls only (async-signal-safe, no allocation: the mother calls them between clones, the stub
// after clone and before exec); only a failure builds its Status.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstring>

#include "common/fd.h"
#include "common/status.h"

namespace sandpool {

// Calls take(fd) for each descriptor of each SCM_RIGHTS message in `msg`, as recvmsg(2) filled
// it: the one walk of received fds, for these functions and for Channel. take owns each fd it
// is given. No system calls and no allocation of its own.
template <typename Take>
void ForEachReceivedFd(struct msghdr* msg, Take&& take) {
  for (struct cmsghdr* c = CMSG_FIRSTHDR(msg); c != nullptr; c = CMSG_NXTHDR(msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      take(fd);
    }
  }
}

// One tag byte with `n` (<= 8) fds attached.
Status SendWithFds(int sock, char tag, const int* fds, size_t n);
// One tag byte and at most one fd (more are closed: never more than asked for). Received fds
// are close-on-exec.
Status ReceiveWithFd(int sock, char* tag, UniqueFd* fd);
// One tag byte and at most `max` (<= 8) fds, which the caller then owns (`*got` of them).
Status ReceiveWithFds(int sock, char* tag, int* fds, size_t max, size_t* got);

}  // namespace sandpool
