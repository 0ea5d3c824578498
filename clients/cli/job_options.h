// Command-line parsing for the `sandpool` CLI: global options (Redis address, key prefix,
// queue) and the job options shared by `run` and `submit`. Pure: no I/O except reading the
// files named by --stdin-file / reading stdin for --stdin, which ParseJobOptions does itself so
// that every error is reported before anything is sent.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "queue/protocol.h"

namespace sandpool::cli {

// Exit statuses of the CLI itself (a job's own status is passed through as is).
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNotFinished = 3;
inline constexpr int kExitFailure = 125;  // could not talk to Redis, etc. (like `error`)

struct GlobalOptions {
  std::string redis_url = "redis://127.0.0.1:6379";  // --redis, else $SANDPOOL_REDIS_URL
  std::string prefix = "sandpool";                    // --prefix
  std::string queue = "default";                      // --queue
};

// Consumes a global option at args[*i] ("--redis URL", "--redis=URL", --prefix, --queue),
// advancing *i past its value. Returns true if args[*i] was one; an error when its value is
// missing or invalid.
Result<bool> ConsumeGlobalOption(const std::vector<std::string>& args, size_t* i,
                                 GlobalOptions* g);

struct JobOptions {
  JobSpec spec;                 // id, argv|shell, env, cwd, stdin, timeout_ms (0: server default)
  bool send_max_output = false;  // --max-output given
  bool json = false;             // --json
  bool help = false;             // --help: nothing else is meaningful
};

// Parses the arguments after `run` / `submit`. Global options are accepted among them. The
// command is everything after `--`, or everything from the first argument that is not an
// option. `read_stdin` is called for --stdin (tests pass a fake); it returns the bytes or an
// error. An id is generated (NewJobId) when --id is not given.
Result<JobOptions> ParseJobOptions(const std::vector<std::string>& args, GlobalOptions* g,
                                   Result<std::string> (*read_stdin)());

// 128 random bits from getrandom(2) as 32 lowercase hex digits.
Result<std::string> NewJobId();

// "1.5" seconds -> 1500 ms; rejects negatives, junk and 0.
Result<uint64_t> ParseSeconds(std::string_view s);
// "1048576", "64k", "16M", "1G" (powers of 1024) -> bytes.
Result<uint64_t> ParseByteSize(std::string_view s);

// Reads all of fd up to `max` bytes; more than `max` is an error.
Result<std::string> ReadAllFd(int fd, size_t max);

}  // namespace sandpool::cli
