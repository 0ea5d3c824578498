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
#include <vector>

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

// `nursery_lib` >= 0 (an open nursery library): the sandbox's main process becomes the
// template's nursery mother instead of a stub (nursery.h); Ready means the mother is.
Result<Sandbox> PrepareSandbox(const SandboxConfig& config, uint32_t slot, SlotCgroup& cgroup,
                               const SeccompProgram* seccomp, int nursery_lib = -1);

// The two ends of a sandbox's pipes and stub socket: the host's, in a Sandbox, and the six
// init takes, in the order it expects them at fds 3-8 (sync read, status write, stub socket,
// stdin read, stdout write, stderr write).
// clone3 of a sandbox's init into `namespaces` (CLONE_NEW* flags), with a pidfd in *pidfd and
// SIGCHLD at its exit: its pid in the parent, 0 in init, -1 (errno) on failure.
long CloneInit(uint64_t namespaces, int* pidfd);

struct SandboxFds {
  Sandbox sb;
  UniqueFd inside[6];
};
Result<SandboxFds> MakeSandboxFds();

// The keeper's half of preparing a sandbox whose init (sb.init_pid, sb.pidfd) waits on its sync
// pipe: puts init into the slot cgroup, writes `id_map` as its uid and gid map (unless empty:
// a nursery's sandboxes share the mother's user namespace), lets it go and waits for the stub's
// 'R'. On failure the sandbox is killed and init's own report, if any, returned.
Result<Sandbox> FinishSandbox(Sandbox sb, SlotCgroup& cgroup, const std::string& id_map);

// Inside a sandbox, shared by the sandboxes a keeper clones and those a nursery clones. init's
// fds: 3 sync (read), 4 status (write), 5 stub socket, 6-8 the job's stdin, stdout, stderr.
// InitSetUp: waits for the keeper's go, becomes sandbox root, enters its cgroup namespace, sets
// the hostname and mounts the sandbox's filesystems; reports on the status pipe and exits on
// failure. InitServe: given the stub's pid, drops the job's fds and reaps until the stub ends,
// then reports its wait status and exits (which kills the pid namespace).
void InitSetUp(const SandboxConfig& config);
[[noreturn]] void InitServe(const SandboxConfig& config, pid_t stub);
// The stub's confinement (fds 0-2 the job's stdio, 3 its socket): new session, no capabilities,
// uid 1000, no_new_privs, rlimits, default signal dispositions, then the seccomp filter. A
// failure is reported on fd 3 and exits.
void StubPrologue(const SandboxConfig& config, const SeccompProgram* seccomp);
// Reports "F<what>" on init's status pipe and exits.
[[noreturn]] void InitFail(int status_fd, const std::string& what);
// Moves `fds` to 3, 4, ... in order and closes every other fd above 2.
void ArrangeFds(std::vector<int> fds);
// Every signal to its default disposition, nothing blocked.
void ResetSignals();

// Reads everything init wrote on its status pipe (call after init exited); empty if nothing.
std::string DrainStatus(int fd);

// Kills init (and so the whole sandbox) through its pidfd; harmless if already dead.
void KillSandbox(const Sandbox& sb);

}  // namespace sandpool
