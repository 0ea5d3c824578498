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

}  // namespace sandpool
