// What the CLI prints: job output, the error line, a result as JSON, and generic msgpack values
// (daemon heartbeats) as JSON. Writes go straight to the fds with write(2), unbuffered, so
// output streamed live is never held back and never interleaves badly with stderr.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "queue/protocol.h"

namespace sandpool::cli {

// Writes all of `data` to fd 1 or 2. Errors (e.g. EPIPE from `| head`) are returned; callers
// streaming a job's output ignore them so the job's exit status still comes through.
Status WriteFd(int fd, std::string_view data);

// Prints the part of r's stdout/stderr not printed yet (the first `skip_*` bytes were).
void PrintResultOutput(const JobResult& r, uint64_t skip_stdout, uint64_t skip_stderr);

// "sandpool: <code>: <message>" on stderr for results that carry an error, and a one-line note
// for outcomes other than a plain exit or signal (timeout, limits); nothing otherwise.
void PrintOutcomeLine(const JobResult& r);

// The result as one JSON object (one line, no newline), every field of PROTOCOL.md section 5;
// stdout/stderr as JSON strings with invalid UTF-8 escaped.
std::string ResultToJson(const JobResult& r);

// Any msgpack value as JSON (maps with non-string keys get their keys rendered as JSON text;
// bin as a string with invalid UTF-8 escaped). Invalid input yields an error Status.
Result<std::string> MsgpackToJson(std::string_view bytes);

}  // namespace sandpool::cli
