#include "worker/runners/nursery.h"
#include "worker/runners/nursery_wire.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/asan.h"
#include "common/fd.h"
#include "common/runtimes.h"
#include "common/syscalls.h"
#include "worker/ipc/messages.h"
#include "worker/runners/zygote.h"
#include "worker/sandbox/sandbox_init.h"

namespace sandpool {
namespace {

constexpr const char* kLibraryName = "libsandpool_nursery.so";

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
  const RuntimeInfo* r = FindRuntime(config.runtime);
  return !SANDPOOL_ASAN && r != nullptr && (r->shell || r->name == "python") && config.root_dir.empty() &&
         !config.layer_writable;
}

bool SessionShellMotherApplies(const SandboxConfig& config) {
  return !SANDPOOL_ASAN && config.root_dir.empty();
}

std::vector<std::string> NurseryMotherCommand(const RuntimeInfo& r) {
  std::vector<std::string> command = ZygoteCommand(r);
  if (!r.shell) command.push_back("mother");  // python's zygote, in its mother mode
  return command;
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

}  // namespace sandpool
