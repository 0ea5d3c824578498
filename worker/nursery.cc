#include "worker/nursery.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/syscalls.h"
#include "worker/messages.h"
#include "worker/sandbox_init.h"

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

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

// The job's process shares the mother's memory copy-on-write, and an interpreter writes to
// nearly every page it touches (reference counts). Breaking the sharing now, while the sandbox
// is prepared, keeps those page faults off the job's path: one madvise per writable private
// mapping instead of a fault per page when the job runs.
void PopulatePrivateMemory() {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    unsigned long lo = 0, hi = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %4s", &lo, &hi, perms) != 3) continue;
    if (perms[0] != 'r' || perms[1] != 'w' || perms[3] != 'p') continue;
    if (line.find("[vvar") != std::string::npos || line.find("[vsyscall") != std::string::npos) continue;
    (void)::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_POPULATE_WRITE);
  }
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

long NurseryCloneInit(const int* fds, int nfds, int* pidfd) {
  if (nfds != 6) return -EINVAL;
  // The mother's user namespace is the sandbox's: it is mapped already.
  long pid = sys::Clone3(CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS, pidfd);
  if (pid < 0) return -errno;
  if (pid == 0 && ArrangeFds(fds, 6) != 0) ::_exit(126);  // its status pipe is not in place
  return pid;
}

int NurseryEnter(const char* blob, size_t len) {
  // Kept for the process's life: init serves with it, the stub's confinement reads it.
  static SandboxConfig config;
  static SeccompProgram seccomp;
  Status s = DecodeNurseryConfig(std::string_view(blob, len), &config, &seccomp);
  if (!s.ok()) InitFail(s.message());
  // The mother's dispositions (an interpreter's handlers, its reaper) are not init's.
  if (int err = ResetSignals()) InitFail("reset signals: " + std::string(std::strerror(err)));
  InitSetUp(config);
  // Under memory pressure the kernel is to kill the job, not the slot's mother (whose memory
  // counts in the same cgroup): init and the stub make themselves the first choice.
  if (int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC); fd >= 0) {
    (void)!::write(fd, "1000", 4);
    ::close(fd);
  }
  // A real fork: the stub goes back into the interpreter as the job's process and needs memory
  // of its own (init stays here, reaping).
  pid_t stub = ::fork();
  if (stub == 0) {
    // A failure is the sandbox's: exiting before the stub's 'R' fails its preparation.
    for (int fd = 0; fd < 3; ++fd) {
      if (::dup2(6 + fd, fd) != fd) ::_exit(126);
    }
    const int sock = 5;
    if (ArrangeFds(&sock, 1) != 0) ::_exit(126);
    PopulatePrivateMemory();
    StubPrologue(config, &seccomp);
    return 0;
  }
  InitServe(config, stub);
}

}  // namespace sandpool
