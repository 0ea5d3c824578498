// A session sandbox's agent: its init (pid 1 of the session's pid namespace, the sandbox's root
// user with capabilities in the sandbox's user namespace only), serving the scheduler over fd 5
// (session_messages.h) for the session's whole life. It starts the session's processes (each
// confined exactly like a job: its own process group, uid 1000 unless asked for root, rlimits,
// the seccomp filter), reaps everything, and does the session's file operations
// (session_files.h).
//
// Why init: nothing in the session can signal or trace it (init ignores signals from its own
// namespace, the filter forbids ptrace), and when it ends the kernel ends every process of the
// session. Why inside the sandbox: every path it resolves is the session's own view, so no link
// or mount a session makes can lead it anywhere else (the Judge0 CVE-2024-28185 class is
// impossible by construction, not by checking).
//
// Runs after clone, in init (sandbox_init.h's rules for init): it may allocate; it never writes
// to the host's stdio; it ends only when the keeper kills it or its socket closes.
#pragma once

#include "worker/sandbox/sandbox_config.h"

namespace sandpool {

struct SeccompProgram;

// fd 5: the socket to the scheduler (first, 'R' on it when ready). `nursery_lib`: an fd of
// libsandpool_nursery.so, or -1; with it the session's warm shells are clones of one preloaded
// shell (runners/session_shell_mother.h), without it each is exec'd. Never returns.
[[noreturn]] void SessionAgentMain(const SandboxConfig& config, const SeccompProgram* seccomp, int nursery_lib);

// init's whole life in a session sandbox (the CustomInit that session_keeper.cc hands
// PrepareSessionSandbox): set-up on the session's disk (`fresh`: a new one; InitSetUp with
// MountSessionFilesystems), then SessionAgentMain until the keeper ends it.
[[noreturn]] void SessionInitMain(const SandboxConfig& config, const SeccompProgram* seccomp, bool fresh,
                                  int nursery_lib);

}  // namespace sandpool
