// One sandbox, the keeper's side: created by the keeper, used for one job, then destroyed. What
// runs inside it is sandbox_init.h; what the two say to each other is stub_protocol.h.
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
// init's fds, from 3: the sync pipe (read), the status pipe (write), the stub socket, then the
// job's stdin (read), stdout and stderr (write). With a runtime, the stub execs the template's
// zygote at once, which speaks the stub's part of stub_protocol.h on the same socket.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/status.h"
#include "worker/sandbox/cgroup.h"
#include "worker/sandbox/sandbox_config.h"

namespace sandpool {

struct SeccompProgram;

struct Sandbox {
  pid_t init_pid = -1;
  UniqueFd pidfd;       // init's pidfd: poll for exit, pidfd_send_signal to kill
  UniqueFd stub;        // keeper end of the stub socket
  UniqueFd script;      // a shell zygote's script pipe, write end (stub_protocol.h, 'W'); else none
  UniqueFd status;      // read end of init's status pipe
  UniqueFd sync;        // keeper's end of the start-up pipe; its closing tells init we died
  // Host ends of the job's stdio, handed to the scheduler.
  UniqueFd stdin_w, stdout_r, stderr_r;
  SandboxCgroup cgroup;  // the sandbox's own; remove it once init is gone
};

// `command`: the interpreter command line the stub execs at once, with the template's base
// environment (a template's zygote, worker/runners/zygote.h: ZygoteCommand), or empty: the stub
// waits for a RunMsg. The caller chooses it, so construction does not know its payloads; init
// takes its own copy after clone.
// `nursery_lib` >= 0 (an open nursery library): the sandbox's main process becomes the
// template's nursery mother instead of a stub (worker/runners/nursery.h), exec'ing `command`
// (NurseryMotherCommand) with the library; Ready means the mother is.
// `cgroup` (a new SandboxCgroup of the slot) becomes the sandbox's.
Result<Sandbox> PrepareSandbox(const SandboxConfig& config, uint32_t slot, SandboxCgroup cgroup,
                               const SeccompProgram* seccomp, const std::vector<std::string>& command,
                               int nursery_lib = -1);

// An init of the caller's own, run after clone in place of a job's (InitMain), its fds in place
// (sandbox_init.h's rules for init hold for it). Never returns: a session's
// (worker/session/session_agent.h: set-up on the session's disk, `fresh` a new one, then the
// session's agent). `nursery_lib`: init's fd of the nursery library, or -1.
using CustomInit = void (*)(const SandboxConfig& config, const SeccompProgram* seccomp, bool fresh, int nursery_lib);

// A session's sandbox (worker/session/session_keeper.h): init (`init`) mounts the session's disk
// (at layout::kDisk, made ready by the keeper; `fresh`: new) as its root and becomes the
// session's agent, whose socket is `stub` (its 'R' was read: it is serving). The stdio pipes are
// unused. `nursery_lib` (an fd of libsandpool_nursery.so, or -1) goes to init with its fds: the
// agent's warm shells then come from a shell mother (runners/session_shell_mother.h).
Result<Sandbox> PrepareSessionSandbox(const SandboxConfig& config, uint32_t slot, SandboxCgroup cgroup,
                                      const SeccompProgram* seccomp, bool fresh, CustomInit init,
                                      int nursery_lib = -1);

// The two ends of a sandbox's pipes and stub socket: the host's, in a Sandbox, and the six
// init takes, in the order it expects them at fds 3-8 (sync read, status write, stub socket,
// stdin read, stdout write, stderr write).
struct SandboxFds {
  Sandbox sb;
  UniqueFd inside[6];
};
Result<SandboxFds> MakeSandboxFds();

// The keeper's half of preparing a sandbox whose init (sb.init_pid, sb.pidfd) waits on its sync
// pipe: puts init into sb.cgroup, writes `id_map` as its uid and gid map (unless empty: a
// nursery's sandboxes share the mother's user namespace), lets it go and waits for the stub's
// 'R'. On failure the sandbox is killed (and its cgroup removed) and init's own report, if any,
// returned.
Result<Sandbox> FinishSandbox(Sandbox sb, const std::string& id_map);

// Reads everything init wrote on its status pipe (call after init exited); empty if nothing.
std::string DrainStatus(int fd);
// Reads a report pipe to its end: REQUIRES every other write end is closed, so that EOF comes
// when the one child holding it exec'd (close-on-exec) or exited. Blocks until then: a forked
// child (sanitizer builds) may still be on its way, where a vforked one is already done.
std::string ReadReportToEof(int fd);

// Kills init (and so the whole sandbox) through its pidfd; harmless if already dead.
void KillSandbox(const Sandbox& sb);

}  // namespace sandpool
