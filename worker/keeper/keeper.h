// The keeper: one single-threaded, privileged process per pool slot. It owns the slot's cgroup
// and network namespace, prepares one sandbox at a time, and runs the job the scheduler sends
// in it. It trusts nothing from inside the sandbox: the exit status comes from init over a
// pipe, every figure of accounting from the cgroup.
//
// Conversation with the scheduler (worker/ipc/messages.h), per sandbox generation g:
//   keeper: Ready(g) + fds[stdin w, stdout r, stderr r]   (or Failed, then a retry with backoff)
//   sched:  Run(g, spec)           keeper: Started(g)      (when the exec happened)
//   sched:  Kill(g) (optional)     keeper: Exited(g, accounting)
// Exited can also come without a Run (the sandbox died while idle). Messages for another
// generation than the current one are ignored.
//
// The keeper exits when the scheduler's channel closes, and dies (PDEATHSIG) with the spawner.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "common/fd.h"
#include "worker/sandbox/cgroup.h"
#include "worker/sandbox/sandbox_config.h"

namespace sandpool {

struct KeeperArgs {
  uint32_t slot = 0;
  pid_t parent = 0;  // the spawner
  SandboxConfig config;
  CgroupLayout layout;
  bool session = false;  // a session keeper (session_keeper.h)
};

// Runs the keeper in the calling (freshly forked, single-threaded) process. Never returns.
[[noreturn]] void KeeperMain(const KeeperArgs& args, UniqueFd channel);

}  // namespace sandpool
