// Warm interpreters ("zygotes"). A template with a runtime prepares each sandbox with its
// interpreter already started, modules loaded and memory warmed, all under the sandbox's
// identity, limits and seccomp filter. The job then costs no execve and no loader work.
//
// Conversation over the stub socket (fd 3 in the zygote):
//   zygote -> keeper  'R'                  once it is ready (before the job exists)
//   keeper -> zygote  the job, then EOF    (shutdown(SHUT_WR))
//   zygote -> keeper  "E<errno> <stage>\n" if it could not start the job (bad cwd, exec failed)
//   zygote closes fd 3                      when the job starts: the keeper's "started"
//
// Shell zygotes (sh, bash) receive a shell script the keeper writes (environment, cwd, then the
// job) and eval it. Interpreter zygotes (python, node) receive JSON
// {"kind","code","argv","env","cwd"} and run `code` as `python3 -c` / `node -e` would, in a
// fresh __main__ / global scope; argv and shell jobs sent to them are exec'd (python) or run as
// a child whose end they mirror (node, which cannot exec).
#pragma once

#include <string>
#include <vector>

#include "common/runtimes.h"
#include "worker/ipc/messages.h"

namespace sandpool {

// The runtime a template keeps warm (common/runtimes.h), or nullptr for none ("" or "none").
const RuntimeInfo* TemplateRuntime(const std::string& name);

// The interpreter command line that starts the zygote (argv[0] is an absolute path). A shell's
// zygote sources its job's script from fd 4, the script pipe its stub made (RuntimeInfo's
// shell; stub_protocol.h, 'W'), not from the socket, because a shell reads a script from a
// socket one byte per read(2) (a script of 200 bytes cost ~0.3 ms that way, against ~0.05 ms
// sourced from a file). It opens /proc/self/fd/4 anew and sources it: one assignment of the
// job's script to a variable, which it then evals, once that file and fd 4 are closed.
std::vector<std::string> ZygoteCommand(const RuntimeInfo& r);
// Whether `argv` is a shell zygote's command line (ZygoteCommand's for sh or bash): how the
// nursery library's constructor knows it was preloaded into a shell mother (nursery_lib.cc).
bool IsShellZygoteArgv(int argc, char* const* argv);

// A session's warm shell (session_agent.cc): a shell zygote whose fd 4 is a memfd instead: the
// agent writes ZygotePayload's script there, then shuts fd 3 for writing (the go); the shell
// then sources /proc/self/fd/4. The conversation on fd 3 is otherwise the zygote's: 'R', then
// "E..." or 'S' and its close.
std::vector<std::string> SessionShellCommand();
// Whether `argv` is SessionShellCommand's: how the nursery library's constructor knows it was
// preloaded into a session's shell mother (session_shell_mother.h).
bool IsSessionShellArgv(int argc, char* const* argv);

// The bytes the keeper sends a zygote for `run`: kind "argv" (run.argv), "shell" (run.code is
// the line) or "code" (run.code is source for this runtime). A shell gets `__sp_s=<its script,
// quoted>`, which it sources and then evals (ZygoteCommand).
std::string ZygotePayload(const RuntimeInfo& r, const RunMsg& run);

// POSIX shell single-quoting: the result is one word whose value is exactly `s` (no NUL).
std::string ShellQuote(const std::string& s);

}  // namespace sandpool
