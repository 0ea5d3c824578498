#include "worker/runners/nursery_wire.h"

#include <linux/filter.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "worker/ipc/messages.h"

namespace sandpool {

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
  m.runtime = c.runtime;
  m.base_env = c.base_env;
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
  c->runtime = m.runtime;
  c->base_env = m.base_env;
  return Status::Ok();
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

Status ReceiveWithFds(int sock, char* tag, int* fds, size_t max, size_t* got) {
  *got = 0;
  struct iovec iov = {tag, 1};
  char control[CMSG_SPACE(sizeof(int) * 8)] = {};
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
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (*got < max) fds[(*got)++] = fd;
      else ::close(fd);  // never more than we asked for
    }
  }
  return Status::Ok();
}

Status ReceiveWithFd(int sock, char* tag, UniqueFd* fd) {
  int got_fd = -1;
  size_t got = 0;
  Status s = ReceiveWithFds(sock, tag, &got_fd, 1, &got);
  if (got == 1) fd->reset(got_fd);
  return s.ok() ? s : s.Prefixed("nursery mother");
}

}  // namespace sandpool
