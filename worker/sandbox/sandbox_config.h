// What a sandbox looks like: identities, filesystem sizes, limits. Filled from the daemon's
// configuration; copied into the spawner and keepers at fork time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/job_env.h"
#include "worker/sandbox/cgroup.h"

namespace sandpool {

// The job's user inside every sandbox (uid and gid): `sandbox` in its /etc/passwd, the owner of
// /work, and the canonical owner of a session disk's files (mount_util.h CanonicalOwnersMap).
// Outside, it is its slot's host_id_base + 2n + 1 (SandboxConfig).
inline constexpr uint32_t kSandboxJobUid = 1000;

// A slot's link to the host for templates with network (worker/sandbox/netns_setup.h). Off: the sandbox
// has loopback only, as every sandbox had before network policies existed.
struct SlotNetwork {
  bool enabled = false;
  uint32_t pool_base = 0;      // host byte order; slot n: host end pool_base + 2n, sandbox + 1 (/31)
  std::string host_if_prefix;  // the host end is named this + the slot number (15 bytes at most)
  // Sessions may expose ports: TCP connections arriving on eth0 (only the preview proxy's can)
  // are handed to 127.0.0.1, so servers bound to localhost are reachable too.
  bool expose = false;
  // Bandwidth of each direction of the link, bytes per second (0: unlimited): a tbf qdisc on
  // both ends, so one sandbox cannot saturate the host's uplink.
  uint64_t rate_bytes = 0;
};

struct SandboxConfig {
  std::string template_name = "default";
  // The interpreter kept warm in each sandbox ("", "sh", "bash", "python", "node"; see zygote.h).
  std::string runtime;
  // The environment the zygote starts with (jobs replace it with their own): the template's
  // variables over the defaults (common/job_env.h).
  std::vector<std::string> base_env = JobEnvironment({}, {});
  // Host ids: slot n maps sandbox uid/gid 0 to host_id_base + 2n and kSandboxJobUid (the job's
  // user) to host_id_base + 2n + 1. Never 0; distinct per slot.
  uint32_t host_id_base = 200000;
  // Slot `slot`'s sandbox root on the host (its job user is the next id): the one place the
  // numbering above is computed.
  uint32_t SlotRootId(uint32_t slot) const { return host_id_base + 2 * slot; }
  std::string hostname = "sandbox";
  uint64_t work_bytes = 256ull << 20;   // tmpfs /work (the job's cwd)
  uint64_t tmp_bytes = 64ull << 20;     // tmpfs /tmp
  uint64_t shm_bytes = 16ull << 20;     // tmpfs /dev/shm
  uint64_t inodes = 65536;              // per tmpfs
  uint64_t open_files = 1024;           // RLIMIT_NOFILE
  uint64_t file_size_bytes = 256ull << 20;  // RLIMIT_FSIZE
  uint64_t cpu_time_ms = 0;             // default CPU-time limit (0: none beyond the timeout)
  CgroupLimits cgroup;
  // Host directories bound read-only at the same path (merged-/usr symlinks such as /bin are
  // recreated as symlinks). /etc is synthesized; see rootfs.cc for what it contains.
  std::vector<std::string> ro_dirs = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};
  // A prepared root directory (an unpacked image with its own /usr, /bin, /etc ...) used as the
  // sandbox's root instead of the host binds above (ro_dirs and the synthesized /etc are then
  // not used). Read-only on the host; every sandbox sees it through its own copy-on-write
  // overlay. Files the image's uid 0 and 1000 own belong to the sandbox's root and job user.
  std::string root_dir;
  // A template's baked layer: the host directory its setup commands filled. Jobs see it at
  // layer_mount as the lower layer of a per-sandbox overlay (copy-on-write: a job may change
  // what setup made, and nobody else sees the change); while the layer is being built it is
  // bound writable there instead (layer_writable).
  std::string layer_host_dir;
  std::string layer_mount = "/opt";
  bool layer_writable = false;
  // Host uid/gid of the build sandbox's root (its job user is +1): the owner of the layer's
  // files. Each slot sees them through an idmapped mount as its own sandbox root and job user.
  uint32_t layer_owner_base = 0;
  // Size cap of each sandbox's copy-on-write upper layer (tmpfs), shared by the layer overlay
  // and the prepared-root overlay.
  uint64_t upper_bytes = 64ull << 20;
  SlotNetwork network;
};

}  // namespace sandpool
