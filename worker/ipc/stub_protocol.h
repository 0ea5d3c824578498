// What the keeper and the processes inside a sandbox say to each other, in one place: the stub
// socket's bytes (both directions) and init's report on the status pipe. Everything here that
// the sandbox side uses is async-signal-safe and allocation-free: it runs in the stub, which
// shares init's memory until it execs (sandbox_init.h).
//
// Stub socket, sandbox -> keeper (the stub, a warm interpreter or a nursery's job process):
//   'W' + one fd           a shell zygote's stub, once, before it execs the shell: the write end
//                          of the pipe the shell reads its job's script from (its fd 4,
//                          kStubScriptFd; SCM_RIGHTS, worker/ipc/fd_passing.h). A shell's `read`
//                          takes one byte per read(2) from a socket; sourced from the pipe the
//                          script is read in blocks (zygote.cc). The keeper only writes to it.
//   'R'                    ready: confined, waiting for the job (sent once, during preparation)
//   'S'                    starting the job now (just before execve, or before running code)
//   "E<errno> <stage>\n"   could not start it; stage "cwd" or "exec" is the job's fault
//                          (exec_failed), any other stage a failure of the sandbox
// then the socket closes (at execve it is close-on-exec; an interpreter closes it). 'S' then EOF
// means the job started; EOF without 'S' means the process died before the job started.
//
// Stub socket, keeper -> stub (no warm interpreter): the job as an exec image, u32 length then
// the body (EncodeExecImage). Warm interpreters get a script or JSON instead (zygote.h): python
// and node on this socket, a shell on its script pipe, which the keeper closes after the script
// (the shell reads it to EOF).
//
// Status pipe, init -> keeper: 'F' <message> when setting the sandbox up failed, or 'S' + an
// InitReport once the job's main process ended and every other process was reaped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "worker/ipc/messages.h"

namespace sandpool {

inline constexpr char kStubScriptPipe = 'W';
inline constexpr int kStubScriptFd = 4;  // the script pipe's read end, in the shell
inline constexpr char kStubReady = 'R';
inline constexpr char kStubStarting = 'S';

// What the stub socket carried after 'R'.
struct StubReport {
  bool starting = false;  // 'S' seen
  int error = 0;          // errno of an "E" record (ENOENT when it named none)
  std::string stage;      // its stage
  bool failed() const { return !stage.empty(); }
};
// Whether a failure at `stage` is the job's own (a cwd or program that cannot be used:
// exec_failed), not the sandbox's (sandbox_failed).
inline bool StubStageIsJobs(std::string_view stage) { return stage == "cwd" || stage == "exec"; }
StubReport ParseStubReport(std::string_view said);

// Writes "E<err> <stage>\n" into buf (at least 48 bytes); returns its length. Async-signal-safe.
size_t FormatStubFailure(char* buf, int err, const char* stage);

// ---- The exec image: a job ready for execve, in one flat block ---------------------------------

// Fixed part of the body, followed by NUL-terminated strings: cwd, argv[0..argc), envp[0..envc),
// then the `candidates` paths to try as the program, in order (the PATH search is done by the
// keeper, so the stub needs no environment parsing).
struct ExecImageHeader {
  uint32_t magic;
  uint32_t argc, envc, candidates;
  uint64_t cpu_time_ms;      // 0: none
  uint64_t file_size_bytes;  // 0: the sandbox's default
  uint64_t open_files;       // 0: the sandbox's default
};
inline constexpr uint32_t kExecImageMagic = 0x58455053;  // "SPEX"
inline constexpr uint32_t kMaxExecImageStrings = 16384;   // far above the protocol's limits

// Keeper side: the framed image (u32 body length, then the body) of `run`. `default_path` is
// searched for a program without '/' when run.env sets no PATH.
std::string EncodeExecImage(const RunMsg& run, std::string_view default_path);

// Stub side, in place and without allocation: `ptrs` has room for argc + envc + 3 pointers.
// Fills argv (with one spare slot before it, for running a script through /bin/sh) and envp.
struct ExecImage {
  const ExecImageHeader* header;
  const char* cwd;
  char** argv;  // argv[-1] is writable spare room
  char** envp;
  const char* candidates;  // `header->candidates` NUL-terminated strings, back to back
};
bool MapExecImage(char* body, size_t len, char** ptrs, size_t nptrs, ExecImage* out);

// ---- init's report --------------------------------------------------------------------------

struct InitReport {
  int32_t wait_status;
  uint8_t disk_full;
};
inline constexpr size_t kInitReportSize = 1 + sizeof(InitReport);
// 'S' + the report, into buf (kInitReportSize bytes). Async-signal-safe.
void EncodeInitReport(const InitReport& r, char* buf);
// From what the status pipe carried: true and *r when it holds a report.
bool DecodeInitReport(std::string_view said, InitReport* r);
// The 'F' message, or empty.
std::string InitFailure(std::string_view said);

}  // namespace sandpool
