// One sandbox: created by the keeper, used for one job, then destroyed.
//
// PrepareSandbox clones the sandbox's init with new user, pid, mount, ipc, uts and cgroup
// namespaces (the network namespace is the keeper's own, loopback only, shared by the slot's
// sandboxes one after another), writes its uid/gid maps, and waits until the stub inside is
// ready: the stub has its stdio pipes, a new session, no capabilities, no_new_privs and its
// rlimits, and waits for a RunMsg. seccomp is loaded by the stub just before execve.
//
// Processes and their roles:
//   init  (pid 1 inside; sandbox uid 0 = host_id_base+2n): mounts /work /tmp /proc /dev/shm,
//         forks the stub, reaps every child, reports the stub's wait status on the status
//         pipe, then exits; its exit kills the whole pid namespace.
//   stub  (sandbox uid 1000 = host_id_base+2n+1): becomes the job by execve.
//
// Status pipe (init -> keeper): 'F' <message> when setup failed, or 'S' <InitReport> when the
// job's main process ended. Stub socket (keeper <-> stub): 'R' when ready; the keeper sends a
// u32-length-prefixed RunMsg; the stub answers "E<errno> <stage>\n" if it could not exec, else
// the socket closes at exec (CLOEXEC), which is how the keeper knows the job started. With a
// runtime, the stub instead execs the template's zygote at once, which then speaks the same
// way on the same socket (zygote.h).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/fd.h"
#include "common/status.h"
#include "worker/sandbox_config.h"

namespace sandpool {

struct SeccompProgram;
class SlotCgroup;

struct InitReport {
  int32_t wait_status;
  uint8_t disk_full;
};

struct Sandbox {
  pid_t init_pid = -1;
  UniqueFd pidfd;       // init's pidfd: poll for exit, pidfd_send_signal to kill
  UniqueFd stub;        // keeper end of the stub socket
  UniqueFd status;      // read end of init's status pipe
  UniqueFd sync;        // keeper's end of the start-up pipe; its closing tells init we died
  // Host ends of the job's stdio, handed to the scheduler.
  UniqueFd stdin_w, stdout_r, stderr_r;
};

Result<Sandbox> PrepareSandbox(const SandboxConfig& config, uint32_t slot, SlotCgroup& cgroup,
                               const SeccompProgram* seccomp);

// Reads everything init wrote on its status pipe (call after init exited); empty if nothing.
std::string DrainStatus(int fd);

// Kills init (and so the whole sandbox) through its pidfd; harmless if already dead.
void KillSandbox(const Sandbox& sb);

}  // namespace sandpool
