// Code that runs INSIDE a sandbox, after clone: its init (pid 1) and its stub (which becomes the
// job). The keeper's side is sandbox.h. Rules for every function declared here:
//  - init is a clone (its own copy of memory) of the single-threaded keeper, or shares a nursery
//    mother's memory (nursery.h: it may allocate until it has cloned the job and let the mother
//    go; from then on, in InitServe, it allocates nothing). It may allocate. It holds fds 3-8 (sandbox.h says which),
//    never writes to the host's stdio, and reports failures on its status pipe (InitFail), never
//    to a log: the stderr it inherited is not the host's, and from the stub on it is the job's.
//  - the stub is cloned CLONE_VM | CLONE_VFORK from init, on a stack of its own: it shares init's
//    memory until its execve, and init stays suspended meanwhile. So the stub does not allocate
//    (the heap is init's), returns into none of init's frames, and calls only raw system calls
//    and functions marked async-signal-safe (stub_protocol.h; LoadSeccompProgram). Everything it
//    needs is prepared by init before the clone (StubPlan) or read into memory it maps itself.
//    A failure is reported on its socket, fd 3 ("E<errno> <stage>"), then it exits.
//  - in a sanitizer build with AddressSanitizer (which cannot follow a switch to another stack)
//    the stub is forked instead; everything else is the same.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "worker/sandbox/sandbox_config.h"

namespace sandpool {

struct SeccompProgram;

// init's whole life, in a sandbox the keeper cloned (PrepareSandbox): set-up, then the stub,
// then InitServe. `command` (PrepareSandbox's): the interpreter the stub execs, or empty.
// `nursery_lib` >= 0: the stub becomes the template's nursery mother.
// (A session sandbox's init is the session side's, passed to PrepareSessionSandbox.)
[[noreturn]] void InitMain(const SandboxConfig& config, const SeccompProgram* seccomp,
                           const std::vector<std::string>& command, int nursery_lib);

// A process of the sandbox, started from its init (the session agent). Everything is prepared
// by the caller; the child (CLONE_VM | CLONE_VFORK, so the caller waits until it execs or dies)
// only moves fds, confines itself (StubPrologue: a new session and process group, no
// capabilities unless `as_root`, rlimits, the seccomp filter) and execs. fds[0..3] become its
// 0..3; fd 3 is where a failure is reported ("E<errno> <stage>") and stays open across the exec
// only for an interpreter (`interp_argv`, which speaks on it: a warm shell), not for `image`.
// fds[4], if given (an interpreter only), becomes its fd 4 and stays open too (a warm shell's
// script, zygote.h).
struct SandboxProcessSpec {
  const SandboxConfig* config = nullptr;
  const SeccompProgram* seccomp = nullptr;
  int fds[5] = {-1, -1, -1, -1, -1};
  bool as_root = false;
  const struct ExecImage* image = nullptr;  // exec this (cwd, argv, env, PATH candidates); or
  char* const* interp_argv = nullptr;       // exec this interpreter
  char* const* interp_envp = nullptr;
  const char* interp_cwd = "/work";
  // The child is the caller's sibling (CLONE_PARENT): its parent, which reaps it, is the
  // caller's. For a helper that spawns on its parent's behalf (the session agent's shell
  // factory). Not for init, which the kernel refuses it.
  bool as_sibling = false;
};
// The child's pid, or -1 with errno.
pid_t SpawnSandboxProcess(const SandboxProcessSpec& spec);

// The parts a nursery's sandboxes share with the keeper's (nursery.cc).
// InitSetUp: waits for the keeper's go, becomes sandbox root, enters its cgroup namespace, sets
// the hostname and mounts the sandbox's filesystems (`mount`, default MountSandboxFilesystems);
// on failure reports and exits.
void InitSetUp(const SandboxConfig& config, Status (*mount)(const SandboxConfig&) = nullptr);
// A shell zygote's script pipe (stub_protocol.h, 'W'), made by the job's process once confined
// (StubPrologue; fd 3 its socket, nothing open above it): its read end becomes kStubScriptFd,
// inherited, its write end goes to the keeper. A failure is reported on fd 3 and exits.
// Async-signal-safe.
void HandOverScriptPipe();
// What a shell template's nursery mother (nursery.h) is started with besides the sandbox's
// environment: the loader preloads the nursery library (her fd 4), whose constructor is the
// mother, and binds every symbol at once. She removes both before the shell reads its
// environment (nursery_lib.cc).
inline constexpr const char* kNurseryPreloadEnv = "LD_PRELOAD=/proc/self/fd/4";
inline constexpr const char* kNurseryBindNowEnv = "LD_BIND_NOW=1";
// InitServe: drops the job's fds, reaps until `stub` ends, kills and reaps the rest of the pid
// namespace, reports the stub's wait status, exits (which ends the namespace). Allocates nothing
// (a nursery's init runs it in memory the mother uses at the same time).
[[noreturn]] void InitServe(const SandboxConfig& config, pid_t stub);
// The stub's confinement (fds 0-2 the job's stdio, 3 its socket): new session, no capabilities,
// uid 1000 (or, `as_root`, the sandbox's root with its capabilities in the sandbox's user
// namespace only: a session's command asked to run as root), no_new_privs, rlimits, default
// signal dispositions, then the seccomp filter. A failure is reported on fd 3 and exits.
// Async-signal-safe.
void StubPrologue(const SandboxConfig& config, const SeccompProgram* seccomp, bool as_root = false);
// Reports "F<what>" on init's status pipe (fd 4) and exits.
[[noreturn]] void InitFail(const std::string& what);
// Moves `fds` (at most 8) to `first`, `first` + 1, ... in order, those from `cloexec_from` on
// close-on-exec and those below it not; closes nothing (the originals stay open too). 0 or an
// errno. Async-signal-safe.
int PlaceFds(const int* fds, int n, int first, int cloexec_from);
// Moves `fds` to 3, 4, ... in order and closes every other fd above 2. 0 or an errno.
// Async-signal-safe.
int ArrangeFds(const int* fds, int n);
// Every signal to its default disposition, nothing blocked. 0 or an errno. Async-signal-safe.
int ResetSignals();

}  // namespace sandpool
