// The runtimes sandpool knows, in one table: what a job's `runtime` may name, what a template may
// keep warm, where each interpreter lives in the sandbox, and how it is given source code on its
// command line. The protocol (queue/), the configuration (scheduler/), the command a job execs
// (JobArgv) and the warm interpreters (worker/runners/zygote.cc) all read it from here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sandpool {

struct RuntimeInfo {
  std::string_view name;    // as in the protocol and the config file
  const char* interpreter;  // absolute path, inside the sandbox (and on the host, which it binds)
  const char* code_flag;    // `interpreter code_flag SOURCE` runs SOURCE
  bool code_jobs;           // a `code` job may name it (PROTOCOL.md section 3)
  // A POSIX shell (the one place that says so). A job for it is a shell script (zygote.h's
  // ZygotePayload), which its warm zygote (worker/runners/zygote.cc) sources from a pipe the stub
  // makes (worker/ipc/stub_protocol.h, kStubScriptPipe) instead of reading it from the stub
  // socket: a shell's `read` takes one byte per read(2), a sourced file is read in blocks. Its
  // nursery has no interpreter in the mother (nursery.h's ShellNurseryApplies).
  bool shell;
};

inline constexpr RuntimeInfo kRuntimes[] = {
    {"sh", "/bin/sh", "-c", false, true},
    {"bash", "/bin/bash", "-c", true, true},
    {"python", "/usr/bin/python3", "-c", true, false},
    {"node", "/usr/bin/node", "-e", true, false},
};

// nullptr for a name not in the table.
inline const RuntimeInfo* FindRuntime(std::string_view name) {
  for (const RuntimeInfo& r : kRuntimes) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

// The kernel's limit on one argument or environment string, its terminating NUL included
// (MAX_ARG_STRLEN, 32 pages): anything exec'd gets strings of at most this many bytes minus one.
inline constexpr size_t kMaxExecString = 32 * 4096;

// The argv that runs `source` with runtime `r` the way `sh -c`, `python3 -c` or `node -e` would.
// For the shells, a source longer than one argument may be (kMaxExecString) is passed in pieces
// and joined again by a short prologue, so that shell lines up to the protocol's limit run in
// every template ($0 is the shell's name either way). Returns an empty argv when `source` cannot
// be passed on this runtime's command line (python and node, past kMaxExecString - 1 bytes).
std::vector<std::string> SourceArgv(const RuntimeInfo& r, const std::string& source);

}  // namespace sandpool
