// The nursery: a fork server for interpreter templates (python).
//
// Starting an interpreter is what a warm Python sandbox costs most: exec, the loader, `site`,
// the preloaded modules; tens of milliseconds of CPU each time, and a warm pool can only hide
// that while jobs come slower than refills. A nursery pays it once per slot. The slot's first
// sandbox is the *mother*: a sandbox like any other (user, pid, mount, ipc and uts namespaces,
// the slot's cgroup and uid maps) whose main process stays sandbox root and runs the
// interpreter with the modules preloaded and this library (libsandpool_nursery.so) loaded. For
// every sandbox after that, the mother clones an init into new pid, mount, ipc and uts
// namespaces, sharing its memory, and that init clones the job's process: the only copy of the
// interpreter's address space the sandbox costs (page-table copies and the copy-on-write faults
// after them are what a warm Python job costs most). init runs exactly the set-up every init
// runs, the job exactly the stub's confinement (cgroup, its own filesystems and /proc, uid 1000,
// no capabilities, no_new_privs, rlimits, seccomp), then returns into the interpreter, which
// speaks the zygote protocol (zygote.h). No exec and no interpreter start-up per sandbox.
//
// What stays as it was: each job gets a fresh sandbox that no job ran in before (a clone of a
// mother that never runs job code, and cannot be reached from a job: another pid namespace, no
// capabilities, and a seccomp filter that forbids ptrace and namespaces); init and the stub are
// the same code; the keeper talks to them the same way. What differs: the job's user namespace
// is the mother's (the same uid pair the slot always maps), and the mother's memory (shared
// copy-on-write with every job) is charged to the slot's cgroup once.
//
// Keeper <-> mother, over the mother's stub socket:
//   mother -> keeper  'R'                         ready (modules and library loaded)
//   keeper -> mother  'C' u32 length, config       once: EncodeNurseryConfig (nursery_wire.h),
//                                                  with the filter each job loads over the
//                                                  mother's (seccomp_policy.h, NurserySeccomp)
//   keeper -> mother  'N' + 6 fds (SCM_RIGHTS)     make a sandbox; the fds are init's 3-8
//   mother -> keeper  'P' + init's pidfd           init exists, waiting for the keeper's go;
//                                                  or 'E' if it could not be cloned
// The keeper then finishes the sandbox as it does its own (FinishSandbox, no uid maps).
//
// This header is the keeper's side; nursery_mother.h is the mother's (the library's) side.
#pragma once

#include <string>
#include <vector>

#include "common/fd.h"
#include "common/status.h"
#include "worker/sandbox/cgroup.h"
#include "worker/sandbox/sandbox.h"
#include "worker/sandbox/sandbox_config.h"
#include "worker/seccomp/seccomp_policy.h"

namespace sandpool {

// Opens the nursery library next to the running binary, or in ../lib/sandpool/ from it (where
// `cmake --install` puts it) (O_RDONLY, close-on-exec);
// an empty fd when there is none (sanitizer builds do not build it): python templates then
// start an interpreter per sandbox.
UniqueFd OpenNurseryLibrary();

// Whether sandboxes of `config` can come from a nursery: a python template on the host's root
// (a prepared root need not have the libraries the nursery library links).
bool NurseryApplies(const SandboxConfig& config);
// Whether they can come from a shell nursery (nursery_mother.h, ShellMotherInit): a sh or bash
// template on the host's root, in a build without AddressSanitizer (whose inits share the
// mother's memory on stacks of their own, which it cannot follow).
bool ShellNurseryApplies(const SandboxConfig& config);

// The command line a mother's sandbox execs (PrepareSandbox's `command`, with the library): the
// python zygote (zygote.h) in its mother mode.
std::vector<std::string> NurseryMotherCommand();

// The keeper's side: sends `config` once to a freshly ready mother.
Status SendNurseryConfig(int mother, const std::string& blob);

// The keeper's side of one sandbox from the mother (its socket `mother`): sends the fds, takes
// init's pidfd and finishes the sandbox like PrepareSandbox does, in `cgroup`.
Result<Sandbox> NurseryPrepareSandbox(int mother, SandboxCgroup cgroup);

}  // namespace sandpool
