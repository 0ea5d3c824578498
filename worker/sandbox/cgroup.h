// Per-slot and per-sandbox cgroups, v1 or v2. Each pool slot owns one cgroup (v1: one directory
// per controller), and each sandbox of the slot runs in a child of it: it carries the memory,
// swap, TCP-buffer (v1), pids and CPU limits and is where the keeper reads a job's CPU time, peak
// memory, OOM kills and refused forks. The sandbox never sees or writes these files (no cgroupfs
// inside, cgroup namespace).
//
// A sandbox cgroup is reused by the slot's next sandbox once every process of the last one is
// gone (Recycle): making and removing one per sandbox (mkdir, limits, rmdir, and the kernel's
// offlining work, which moves what the cgroup still holds to the slot) cost about 2 ms of CPU
// per job on the bench machine, more than a tenth of a warm Python job. What a recycled cgroup
// must not carry into the next job, and how it does not: its processes (Recycle waits until
// none is left), its figures (CPU, OOM kills and refused forks are read as differences from the
// job's start; the peak memory counter is reset), its limits (back to the slot's defaults), and
// memory the last job left charged to it (kernel caches such as dentries, page cache): a cgroup
// that still holds more than a small bound is removed instead, so that the kernel moves the
// charge to the slot, exactly as before. Below the bound, the next job's memory figures and
// limit include that much of another job's reclaimable kernel memory (tests/hostile/
// test_residue.py bounds it; docs/SECURITY.md says why it is acceptable).
//
// Placement, never on the hot path (a sandbox is placed while it is prepared): the keeper
// writes the new sandbox's init into the slot's cgroup.procs (each controller's on v1) before
// init runs anything. What a v1 placement costs (2026-11-29, a fresh child moved into cpu,
// cpuacct, memory and pids in turn): the first write of a burst 25-120 us (the write side of the
// kernel's cgroup_threadgroup_rwsem), each later one 7-10 us; under the bench's load, 2.5% of the
// machine's samples. Fewer hierarchies would save only the cheap writes: not worth a design.
// clone3(CLONE_INTO_CGROUP) would save that write on v2, but the sandbox's user namespace is
// created with an unprivileged euid (see sandbox.cc), and CLONE_INTO_CGROUP's permission check
// would then need cgroup files writable by every slot's uid.
// The keeper itself never joins a slot cgroup: it would be charged for, counted against and
// possibly OOM-killed for the job's use (a job holding memory in memfds or tmpfs is in no
// process's RSS, so the OOM killer would pick the keeper).
//
// Layout: <parent>/<instance>/slot-<n>/<sandbox>, where <parent> is the daemon's own cgroup (so
// limits set on the daemon's service apply to its sandboxes too). v2 also moves the daemon itself
// into <parent>/<instance>/supervisor, since a v2 cgroup with controllers enabled for its
// children may not hold processes itself.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "common/fd.h"
#include "common/status.h"

namespace sandpool {

enum class CgroupMode { kV1, kV2 };

struct CgroupLimits {
  uint64_t memory_bytes = 512ull << 20;
  uint64_t swap_bytes = 0;           // swap on top of memory_bytes (0: none)
  uint64_t pids = 256;               // tasks in the sandbox (threads count)
  uint64_t cpu_quota_us = 100000;    // per cpu_period_us; quota == period is one CPU
  uint64_t cpu_period_us = 100000;
};

struct CgroupStats {
  uint64_t cpu_usage_us = 0;      // cumulative
  uint64_t peak_memory_bytes = 0;  // since the last ResetPeak()
  uint64_t oom_kills = 0;         // cumulative
  uint64_t pids_max_hits = 0;     // cumulative
};

// Where the instance's cgroups live. Discovered once in the daemon before any process is forked,
// then copied into the spawner and keepers.
struct CgroupLayout {
  CgroupMode mode = CgroupMode::kV1;
  // v1: controller ("memory", "pids", "cpu", "cpuacct") -> <mount><own path>/<instance>
  // v2: "" -> <mount><own path>/<instance>
  std::map<std::string, std::string> instance_dirs;
  // v2 only: false when a controller (memory, pids, cpu) is unavailable; limits then are not
  // enforced by the cgroup (only allowed with --allow-missing-controllers, for tests).
  bool v2_has_controllers = true;
};

// Detects the hierarchy ("auto", "v1" or "v2" forced), creates the instance directories
// (removing stale slot directories left by a previous run with the same instance name) and, on
// v2, moves the calling process into the supervisor leaf and enables the controllers.
Result<CgroupLayout> SetUpCgroups(const std::string& requested_mode, const std::string& instance,
                                  bool allow_missing_controllers);

// Removes every slot cgroup (and the sandbox cgroups in them) of the instance, and on v1 the
// instance directories themselves; their processes must be gone (a few retries while the last
// exits settle). What the daemon does when it stops.
Status RemoveSlotCgroups(const CgroupLayout& layout);

// One sandbox's cgroup, a child of its slot's, made for the slot's sandboxes one after the other
// (Recycle, above); its limits are written before each job. Move-only; Recycle() or Remove() it
// once its processes are gone.
class SandboxCgroup {
 public:
  SandboxCgroup() = default;
  bool valid() const { return !dirs_.empty(); }
  const std::string& name() const { return name_; }

  // Moves `pid` (a sandbox init that has not started yet) into the cgroup.
  Status Attach(pid_t pid);
  // Changes the memory and pids limits (0 leaves a value as it is). Cheap: one write each; an
  // error means the limits in force are not the ones asked for.
  // `pids` counts the job's tasks; the sandbox's init is added on top, so a job gets exactly
  // what it asked for.
  Status SetLimits(uint64_t memory_bytes, uint64_t pids);
  uint64_t memory_limit() const { return cur_memory_; }
  // The CPU quota per period (cpu_period_us of the slot's limits).
  Status SetCpuQuota(uint64_t quota_us);
  // Tasks (processes and threads) in the cgroup now.
  Result<uint64_t> ProcessCount();
  Result<CgroupStats> Read();
  // Memory now in use, socket buffers included (v1 charges those apart: kmem.tcp).
  Result<uint64_t> MemoryInUse();
  // v2: writes cgroup.kill. v1: nothing (the sandbox's pid namespace is the kill switch).
  Status KillAll();
  // Removes the cgroup; it must be empty of processes (a few retries while the last exit settles).
  Status Remove();
  // Makes the cgroup ready for the slot's next sandbox. REQUIRES: the last sandbox's init is
  // gone (its pid namespace, and so every process of it, goes with it). Waits (a few retries)
  // until no task is left, then resets the peak memory counter and restores the slot's default
  // limits. An error means the cgroup cannot be reused as it is (a task still in it, more than
  // `max_leftover_bytes` of memory still charged, a counter that cannot be reset: v2 memory.peak
  // is resettable from kernel 6.12): Remove() it and make a new one.
  Status Recycle(uint64_t max_leftover_bytes);

 private:
  friend class SlotCgroup;
  Status WriteFile(const std::string& controller, const char* file, const std::string& value);
  Result<std::string> ReadFile(const std::string& controller, const char* file);
  // The cached fd of `file` (files_), opened now if it is not; -1 with errno set when it cannot be.
  int OpenFile(char mode, const std::string& controller, const char* file);

  CgroupMode mode_ = CgroupMode::kV1;
  std::string name_;
  std::map<std::string, std::string> dirs_;  // controller -> directory ("" on v2)
  // The same directories as fds: the keeper pivots into the sandbox root after creating its
  // slot's cgroup, and from then on reaches cgroupfs only through fds.
  std::map<std::string, std::shared_ptr<UniqueFd>> dir_fds_;
  std::map<std::string, std::shared_ptr<UniqueFd>> parent_fds_;  // the slot's directories
  UniqueFd v2_peak_;  // v2: memory.peak
  // The files read and written per job, opened once ('r' or 'w' + controller + '/' + file) and
  // kept while the cgroup is (an open and a close per figure cost ~0.3 ms per job).
  std::map<std::string, UniqueFd> files_;
  bool enforce_ = true;  // false: v2 without controllers (tests only)
  CgroupLimits limits_;
  uint64_t cur_memory_ = 0, cur_pids_ = 0;
};

class SlotCgroup {
 public:
  SlotCgroup() = default;
  // Creates slot-<slot> under the layout's instance directories (fresh: an existing one is
  // removed first, with any sandbox cgroups left in it).
  static Result<SlotCgroup> Create(const CgroupLayout& layout, uint32_t slot, const CgroupLimits& limits);
  CgroupMode mode() const { return mode_; }

  // A new sandbox cgroup `name` in the slot, with the slot's default limits written.
  Result<SandboxCgroup> NewSandbox(const std::string& name);

 private:
  CgroupMode mode_ = CgroupMode::kV1;
  bool v2_has_controllers_ = true;
  std::map<std::string, std::shared_ptr<UniqueFd>> dir_fds_;  // controller -> slot directory
  std::map<std::string, std::string> dirs_;
  CgroupLimits limits_;
};

}  // namespace sandpool
