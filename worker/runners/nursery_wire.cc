#include "worker/runners/nursery_wire.h"

#include <linux/filter.h>

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

}  // namespace sandpool
