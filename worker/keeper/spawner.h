// The spawner: a single-threaded process forked by sandpoold before it creates any thread,
// whose only job is to fork keepers on request. Forking from a process with threads is unsafe
// (locks held by other threads stay locked in the child), so nothing that forks lives in the
// daemon itself.
//
// The daemon asks with SpawnKeeper(slot); the spawner forks the keeper and answers Keeper(slot,
// pid) with the daemon's end of a new channel to it and a pidfd of the keeper. Keepers are reaped automatically (SIGCHLD
// ignored); a dead keeper shows up as EOF on its channel. The spawner exits when the daemon's
// channel closes and dies with the daemon (PDEATHSIG).
#pragma once

#include <sys/types.h>

#include <vector>

#include "common/fd.h"
#include "common/status.h"
#include "worker/sandbox/cgroup.h"
#include "worker/sandbox/sandbox_config.h"

namespace sandpool {

struct SpawnerHandle {
  pid_t pid = -1;
  UniqueFd channel;  // the daemon's end
};

// Forks the spawner. Call before any thread exists. The child keeps only its channel (and
// stderr for logs). `argv` is main()'s: keepers and sandbox inits are forks of the spawner, and
// /proc/<pid>/cmdline of any process shows its argv memory, which inside a sandbox is readable
// by the job (as /proc/1/cmdline). The spawner overwrites that memory (and the environment
// strings after it) before forking anything, so the daemon's command line and environment,
// which may carry a Redis password, never reach a sandbox. May be null (tests).
// `templates` are the sandbox configurations keepers can be started with (SpawnKeeperMsg names
// one by index).
Result<SpawnerHandle> StartSpawner(const std::vector<SandboxConfig>& templates, const CgroupLayout& layout,
                                   char** argv = nullptr);

}  // namespace sandpool
