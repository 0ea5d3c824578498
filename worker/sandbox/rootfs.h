// The sandbox filesystem, in two stages.
//
// BuildKeeperRoot (once per keeper, host root, in the keeper's private mount namespace):
// builds a minimal root on a fresh tmpfs (read-only binds of the system directories, a
// synthesized /etc, a /dev with only null, zero, full, random and urandom, empty mount points
// /work /tmp /proc /dev/shm) and pivots the keeper into it. Every sandbox's mount namespace is
// a copy of this one, so nothing of the host filesystem beyond these binds exists for it; the
// copy is owned by a less privileged user namespace, which locks every mount in it.
//
// With a template layer or a prepared root directory (root_dir), the keeper also mounts them,
// read-only and idmapped (their owners translated to this slot's sandbox root and job user), under
// /.sandpool in the base root. ro_dirs and the synthesized /etc are not used with a root_dir.
//
// MountSandboxFilesystems (per job sandbox, in its init, inside its user and mount namespaces):
// lays a copy-on-write overlay over the layer (at layer_mount) and over a prepared root (which
// then becomes the sandbox's root by pivot_root), their upper layers on one tmpfs capped at
// upper_bytes; mounts the size-capped tmpfs /work, /tmp and /dev/shm and a fresh /proc for its
// pid namespace. The keeper root keeps a non-recursive bind of the host /proc at /proc only because
// the kernel mounts a new proc in a user namespace only while a fully visible one exists; the
// sandbox's own /proc covers it.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/fd.h"
#include "common/status.h"
#include "worker/sandbox/sandbox_config.h"

namespace sandpool {

// `session`: a session keeper's root, with what sessions need besides (mount_util.h's layout);
// *loop_control then holds /dev/loop-control, for the sessions' disks.
Status BuildKeeperRoot(const SandboxConfig& config, uint32_t slot, bool session = false,
                       UniqueFd* loop_control = nullptr);
// Inside the sandbox (sandbox_mounts.cc): a job sandbox's file systems, and a session
// sandbox's (its disk at layout::kDisk; `fresh`: the disk is new).
Status MountSandboxFilesystems(const SandboxConfig& config);
Status MountSessionFilesystems(const SandboxConfig& config, bool fresh);
// A nursery mother's (nursery.h): a fresh /proc for its pid namespace and, for a template with a
// layer, the layer's read-only lower at layer_mount (what the interpreter finds on its paths at
// start-up is cached in the memory each job copies), and nothing else. Every
// mount of hers is copied into each sandbox she clones (CLONE_NEWNS) and torn down with it; the
// sandbox mounts its own /work, /tmp, /var/tmp, /dev/shm and masked /proc over the keeper root
// anyway, so hers would be copies nobody sees (17 of a shell sandbox's 59 mounts).
Status MountMotherFilesystems(const SandboxConfig& config);
// Whether a sandbox of `config` gets a copy-on-write root / layer (and so a writable "/" or
// layer_mount whose space counts toward disk_full).
bool HasCopyOnWriteRoot(const SandboxConfig& config);
bool HasCopyOnWriteLayer(const SandboxConfig& config);

}  // namespace sandpool
