// The nursery's mother side (the design and the keeper's side: nursery.h): what runs inside a
// mother and its children. libsandpool_nursery.so's C interface (nursery_lib.cc) calls these;
// they run in the sandbox, under sandbox_init.h's rules for init and the stub.
#pragma once

#include "common/status.h"
#include "worker/sandbox/sandbox_config.h"
#include "worker/seccomp/seccomp_policy.h"

namespace sandpool {

// NurseryServe, in a mother, once her interpreter is ready and she has said 'R' (a python mother
// calls it through the library's C interface, a shell's from the library's constructor; both in
// nursery_lib.cc): takes the keeper's config ('C', nursery.h) on `sock`, her socket to the
// keeper, then serves its 'N' messages, each one sandbox, and reaps the sandboxes' inits (her
// children) as they end. Her per-job work is this loop, in C: each page she writes between two
// jobs is a copy-on-write fault, since her memory is shared with the jobs' copies (the loop she
// ran in the interpreter before took about 32 such faults per job; this one takes 1 or 2).
// Each sandbox: init is cloned into new pid, mount, ipc and uts namespaces *sharing the
// mother's memory* (CLONE_VM, on a stack of its own; no page tables copied), with the keeper's
// six fds as its 3-8, and the mother sends the keeper 'P' + init's pidfd ('E' if it could not be
// cloned). init then sets the sandbox up like every init (InitSetUp, while the mother waits: they
// share one heap), clones the job's process (the one copy of the interpreter's memory), confines
// it (StubPrologue, which also resets the signals this loop set; for a shell, also its script
// pipe, HandOverScriptPipe, and /work as its directory) and lets the mother go; from then on init
// only reaps and reports (InitServe, which allocates nothing).
// Returns 0 in each job's process (which resumes in the mother's frame, in its own copy of her
// memory, and carries on in the interpreter); in the mother only -EINVAL (no usable
// config), -EPIPE (the keeper is gone) or another -errno (signals could not be set), after which
// she exits. The job never shares writable memory with init or the mother, which hold
// capabilities in the sandbox's user namespace.
long NurseryServe(int sock);

}  // namespace sandpool
