// A session keeper: a pool slot's keeper (keeper.h) in session mode. It holds at most one
// session's sandbox at a time, for as long as the session runs; between sessions it waits.
//
// For each SessionStart (session_messages.h) it attaches the session's disk image (the fd the
// scheduler sent) to a loop device, mounts its ext4 file system, and mounts that again idmapped
// (the disk's canonical owners 0 and 1000 become this slot's sandbox root and job user, so a
// session keeps its files whichever slot resumes it; the mapping's user namespace is made once,
// when the keeper starts, which is ahead of the session it serves), then clones the session's
// sandbox (PrepareSessionSandbox: its init lays the session's root over the disk and becomes the
// agent) and hands the agent's socket to the scheduler (SessionReady). It serves Stats while the
// session runs, and on SessionStop, or when the sandbox dies, ends it: kills init (the pid
// namespace takes everything with it), unmounts the disk and flushes the image, removes the
// sandbox's cgroup, and says SessionEnded. Then it may serve another session (the scheduler
// keeps it for the next start of its template, so that a resume does not wait for a keeper's
// set-up): what it shares with a session's sandbox is its network namespace, which it replaces
// first, and SessionEnded says whether it did (`reusable`; never for a network template, whose
// slot link is made once per keeper).
//
// The keeper never reads or writes a file of the session: the disk is mounted by file
// descriptor, and only the sandbox's own processes look inside it.
#pragma once

#include <cstdint>

#include "common/fd.h"
#include "worker/ipc/channel.h"
#include "worker/sandbox/cgroup.h"
#include "worker/sandbox/sandbox_config.h"
#include "worker/seccomp/seccomp_policy.h"

namespace sandpool {

// In the keeper process (worker/keeper/keeper.h) of `slot`, after its common set-up
// (SetUpKeeper), with the keeper's sandbox configuration. `nursery_lib`: the nursery library,
// opened before the keeper left the host's file system, or empty (SessionShellMotherApplies,
// runners/nursery.h); each session's agent gets it. Never returns.
[[noreturn]] void SessionKeeperMain(const SandboxConfig& config, uint32_t slot, Channel channel, SlotCgroup cgroup,
                                    SeccompProgram seccomp, UniqueFd loop_control, UniqueFd nursery_lib);

}  // namespace sandpool
