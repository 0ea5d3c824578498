// The sandbox filesystem, in two stages.
//
// BuildKeeperRoot (once per keeper, host root, in the keeper's private mount namespace):
// builds a minimal root on a fresh tmpfs (read-only binds of the system directories, a
// synthesized /etc, a /dev with only null, zero, full, random and urandom, empty mount points
// /work /tmp /proc /dev/shm) and pivots the keeper into it. Every sandbox's mount namespace is
// a copy of this one, so nothing of the host filesystem beyond these binds exists for it; the
// copy is owned by a less privileged user namespace, which locks every mount in it.
//
// MountSandboxFilesystems (per sandbox, in its init, inside its user and mount namespaces):
// mounts the size-capped tmpfs /work, /tmp and /dev/shm and a fresh /proc for its pid
// namespace. The keeper root keeps a non-recursive bind of the host /proc at /proc only because
// the kernel mounts a new proc in a user namespace only while a fully visible one exists; the
// sandbox's own /proc covers it.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"
#include "worker/sandbox_config.h"

namespace sandpool {

Status BuildKeeperRoot(const SandboxConfig& config);
// mkdir -p: creates `path` and its missing parents with `mode`; existing ones are fine.
Status MkdirP(const std::string& path, mode_t mode);
Status MountSandboxFilesystems(const SandboxConfig& config);

}  // namespace sandpool
