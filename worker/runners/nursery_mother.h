// The nursery's mother side (the design and the keeper's side: nursery.h): what runs inside a
// mother and its children. libsandpool_nursery.so's C interface (nursery_lib.cc) calls these;
// they run in the sandbox, under sandbox_init.h's rules for init and the stub.
#pragma once

#include <cstddef>
#include <string_view>

#include "common/status.h"
#include "worker/sandbox/sandbox_config.h"
#include "worker/seccomp/seccomp_policy.h"

namespace sandpool {

// Inside a mother and its children; the library's C interface (nursery_lib.cc) calls these.
// NurseryConfigure, in the mother, once: decodes the keeper's config blob; 0 or -EINVAL.
// NurserySpawn, in the mother (`sock` its socket to the keeper): makes one sandbox. init is
// cloned into new pid, mount, ipc and uts namespaces *sharing the mother's memory* (CLONE_VM,
// on a stack of its own; no page tables copied), with fds[0..5] as its 3-8, and the mother sends
// the keeper 'P' + init's pidfd. init then sets the sandbox up like every init (InitSetUp, while
// the mother waits: they share one heap), clones the job's process (the one copy of the
// interpreter's memory), confines it (StubPrologue) and lets the mother go; from then on init
// only reaps and reports (InitServe, which allocates nothing). Returns init's pid in the mother,
// 0 in the job's process (which resumes in this frame, in its own copy of the memory), -errno on
// failure. The job never shares writable memory with init or the mother, which hold
// capabilities in the sandbox's user namespace.
int NurseryConfigure(const char* blob, size_t len);
long NurserySpawn(const int* fds, int nfds, int sock);

// A shell template's nursery mother (nursery.h) is the init of the slot's first sandbox itself
// (PrepareMotherSandbox's `init`): after the set-up every init does, it loads `seccomp` (the
// nursery's mother filter, seccomp_policy.h), says 'R' on the socket to the keeper (its fd 5),
// takes the keeper's 'C' (the config, with the job's filter) and serves it as the python mother
// does, reaping the sandboxes' inits, its children, as they end. Each sandbox's
// init starts the stub exactly as a keeper's init does (StartStub: the warm shell, exec'd from a
// clone sharing init's memory), so a shell sandbox costs no user namespace, no uid maps and no
// copy of the keeper's address space: init shares the mother's, and the stub execs.
[[noreturn]] void ShellMotherInit(const SandboxConfig& config, const SeccompProgram* seccomp, bool fresh);

}  // namespace sandpool
