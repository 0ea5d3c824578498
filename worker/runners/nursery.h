// The nursery: a fork server for interpreter templates (python, sh, bash).
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
// A python mother loads the library herself (through _ctypes) and calls its C interface. A shell cannot
// load a library: a sh or bash mother is the warm shell started with the loader preloading the
// library and binding every symbol at once (sandbox_init.h, kNurseryPreloadEnv), and the
// library's constructor, which runs before the shell's main, is the mother (nursery_lib.cc). In
// each job's process it returns, and the shell starts its zygote script as if exec'd: a shell
// job costs no exec, no loading and no relocations (measured alone on the bench machine: a
// preloaded dash forking per `echo hi` took 1.7-2.3 ms of CPU and 44 page faults a job, a
// posix_spawn of `sh -c 'echo hi'` 2.9-3.5 ms and 63).
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
#include "common/runtimes.h"
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

// Whether sandboxes of `config` can come from a nursery: a python, sh or bash template on the
// host's root (a prepared root need not have the libraries the nursery library links), in a
// build without AddressSanitizer (whose inits share the mother's memory on stacks of their own,
// which it cannot follow; sanitizer builds do not build the library either).
bool NurseryApplies(const SandboxConfig& config);
// Whether a session of `config` can have its warm shells from a shell mother (the library
// preloaded into the session's shell; session_shell_mother.h): on the host's root (whose libc
// the library links), in a build that has the library.
bool SessionShellMotherApplies(const SandboxConfig& config);

// The command line a mother's sandbox execs (PrepareSandbox's `command`, with the library): the
// template's zygote (zygote.h), python's in its mother mode; a shell's as it is, which the
// loader starts with the library preloaded (sandbox_init.h, kNurseryPreloadEnv).
std::vector<std::string> NurseryMotherCommand(const RuntimeInfo& r);

// The keeper's side: sends `config` once to a freshly ready mother.
Status SendNurseryConfig(int mother, const std::string& blob);

// The keeper's side of one sandbox from the mother (its socket `mother`): sends the fds, takes
// init's pidfd and finishes the sandbox like PrepareSandbox does, in `cgroup`.
Result<Sandbox> NurseryPrepareSandbox(int mother, SandboxCgroup cgroup);

}  // namespace sandpool
