// Protocol v1 (docs/PROTOCOL.md): the job map clients send, the result map and the live events
// the daemon sends back, and the error codes. Pure data and codecs: no I/O, no allocation
// beyond the returned values, thread-compatible. Every decoder treats its input as hostile:
// it never crashes or allocates without bound on any byte string, and reports a precise error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace sandpool {

// The version of the maps this daemon writes for jobs (results, events); the job map is the same
// in every version it reads (1 .. kMaxProtocolVersion; version 2 adds sessions, 3 egress
// policies, 4 completion streams: PROTOCOL.md).
inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr uint32_t kMaxProtocolVersion = 4;
// The largest stored result an `exited` event of an operation (section 16) or a completion
// record (section 21) carries; a larger one is named by its size and read from the result key.
// (FINISH's Lua in scheduler/redis/scripts.cc writes the same bound as 65536.)
inline constexpr size_t kMaxCarriedResultBytes = 64 << 10;

// PROTOCOL.md sections 8 (jobs) and 19 (sessions); kErrorCodes in protocol.cc names each.
enum class ErrorCode {
  kBadPayload,
  kBadVersion,
  kBadField,
  kTooLarge,
  kExecFailed,
  kCancelled,
  kWorkerLost,
  kSandboxFailed,
  kShutdown,
  kInternal,
  // Version 2: sessions.
  kSessionNotFound,
  kSessionLost,
  kSessionStopped,
  kSessionBusy,
  kHostFull,
  kTemplateMismatch,
  kNotFound,
  kExists,
  kIsADirectory,
  kNotADirectory,
  kNotAFile,
  kNotEmpty,
  kPermission,
  kNoSpace,
  kConflict,
  kProcessExited,
  kUnsupported,
};
// "bad_payload", "bad_version", ... as in PROTOCOL.md sections 8 and 19.
std::string_view ErrorCodeName(ErrorCode code);
bool ErrorCodeRetryable(ErrorCode code);
std::optional<ErrorCode> ParseErrorCode(std::string_view name);

struct JobError {
  ErrorCode code;
  std::string message;
};

// Server-side bounds a job is validated against and clamped to (PROTOCOL.md section 3).
struct ServerLimits {
  uint64_t default_timeout_ms = 30000;
  uint64_t max_timeout_ms = 600000;
  uint64_t default_output_bytes = 1 << 20;
  uint64_t max_output_bytes = 16 << 20;
  uint64_t max_stdin_bytes = 16 << 20;
  uint64_t max_argv_bytes = 1 << 20;   // also the limit of the shell line
  uint64_t max_argv_items = 4096;
  uint64_t max_env_bytes = 256 << 10;
  uint64_t max_env_items = 1024;
  uint64_t max_retries = 5;
  // Per-job resource limits: a job may ask for any value up to these maxima (larger values are
  // clamped, smaller than the floor raised to it); 0 in a JobSpec means the server's default.
  uint64_t max_memory_bytes = 512ull << 20;
  uint64_t min_memory_bytes = 16ull << 20;  // below this even the sandbox's init cannot live
  uint64_t max_pids = 256;
  uint64_t min_pids = 4;
  uint64_t max_cpu_time_ms = 600000;
};

// A validated job. Exactly one of argv / shell is set. timeout_ms and max_output_bytes are
// already defaulted and clamped.
// A job's (or session's) egress request (PROTOCOL.md section 20, version 3): rules in the
// grammar of common/egress_rules.h, validated and canonical. `allow` absent: the template's.
struct EgressRequest {
  std::optional<std::vector<std::string>> allow;
  std::vector<std::string> deny;
  bool operator==(const EgressRequest&) const = default;
};

struct JobSpec {
  uint32_t version = kProtocolVersion;
  std::string id;
  std::vector<std::string> argv;     // empty when `shell` is set
  std::optional<std::string> shell;
  std::optional<std::string> code;  // source code for `runtime` (exactly one of argv/shell/code)
  std::string runtime;              // "python", "node" or "bash"; set iff `code` is
  std::string template_name;        // empty: the daemon picks (see PROTOCOL.md section 3)
  std::vector<std::pair<std::string, std::string>> env;  // in the order given; names unique
  std::string cwd = "/work";
  std::string stdin_data;
  uint64_t timeout_ms = 0;
  uint64_t max_output_bytes = 0;
  uint32_t retries = 0;
  uint64_t memory_bytes = 0;  // 0: the server's default
  uint64_t pids = 0;          // 0: the server's default
  uint64_t cpu_time_ms = 0;   // 0: the server's default
  std::optional<EgressRequest> egress;  // version 3 maps only
};

// True for 1..128 bytes of [A-Za-z0-9._:-].
bool ValidJobId(std::string_view id);

// The completion stream a queue entry names (PROTOCOL.md section 21): its fields `notify` (a name
// with the rules of a job id) and `notify_result` ("1": the record carries the result). Returns
// the notify target the daemon's scripts take: "<name>", or "<name>!" with the result; "" when
// the entry names none; bad_field for an invalid name or flag.
std::variant<std::string, JobError> EntryNotifyTarget(std::string_view notify, std::string_view notify_result,
                                                      bool has_notify, bool has_notify_result);
// The runtimes a code job may name.
bool ValidRuntime(std::string_view runtime);
// Template names: 1..64 bytes of [A-Za-z0-9._-].
bool ValidTemplateName(std::string_view name);

// Decodes and validates a job map. On failure the JobError says which rule was broken.
std::variant<JobSpec, JobError> DecodeJob(std::string_view payload, const ServerLimits& limits);
// Encodes a job map (used by clients and tests); the inverse of DecodeJob for valid specs.
std::string EncodeJob(const JobSpec& spec);
// Client side (added): like EncodeJob, but max_output_bytes is sent only when
// `send_max_output_bytes`, so the server's default applies otherwise (JobSpec has no "unset"
// value for it). Both encoders leave out fields equal to their protocol default, and
// timeout_ms == 0 (not a valid value; the server's default applies).
std::string EncodeJobRequest(const JobSpec& spec, bool send_max_output_bytes);

enum class Outcome {
  kExit,
  kSignal,
  kTimeout,
  kCancelled,
  kOutputLimit,
  kMemoryLimit,
  kPidsLimit,
  kCpuLimit,
  kDiskLimit,
  kSeccomp,
  kWorkerLost,
  kError,
};
inline constexpr int kOutcomeCount = 12;
// "exit", "signal", ... as in PROTOCOL.md section 5.
std::string_view OutcomeName(Outcome o);
std::optional<Outcome> ParseOutcome(std::string_view name);
// The CLI's exit status for a result (PROTOCOL.md section 5, last column).
int CliExitCode(Outcome o, std::optional<int> exit_code, std::optional<int> signal);

// The network a job had (results of jobs of network templates): its effective egress policy.
struct NetworkInfo {
  std::vector<std::string> allow, deny;
  bool operator==(const NetworkInfo&) const = default;
};

// `{egress: {allow: [...], deny: [...]}}`, as results and session infos carry a NetworkInfo.
template <typename Packer>
void PackNetworkInfo(Packer& pk, const NetworkInfo& net) {
  auto str = [&](std::string_view s) {
    pk.pack_str(static_cast<uint32_t>(s.size()));
    pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
  };
  pk.pack_map(1);
  str("egress");
  pk.pack_map(2);
  for (const auto& [name, list] : {std::pair<std::string_view, const std::vector<std::string>*>{"allow", &net.allow},
                                   {"deny", &net.deny}}) {
    str(name);
    pk.pack_array(static_cast<uint32_t>(list->size()));
    for (const std::string& rule : *list) str(rule);
  }
}

struct JobResult {
  std::string id;
  Outcome outcome = Outcome::kError;
  std::optional<int> exit_code;
  std::optional<int> signal;
  bool timed_out = false;
  bool killed = false;
  std::string stdout_data;
  std::string stderr_data;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  uint64_t stdout_dropped_bytes = 0;
  uint64_t stderr_dropped_bytes = 0;
  uint64_t exec_time_us = 0;
  uint64_t cpu_time_us = 0;
  uint64_t peak_memory_bytes = 0;
  uint64_t queue_wait_us = 0;
  std::string worker;
  uint32_t attempt = 0;
  std::optional<JobError> error;
  std::optional<NetworkInfo> network;  // absent from the map when not set
};

// Result map (PROTOCOL.md section 5). stdout/stderr are msgpack bin.
std::string EncodeResult(const JobResult& r);
// Accepts bin or str for byte fields; ignores unknown fields (forward compatibility).
std::optional<JobResult> DecodeResult(std::string_view bytes);

// Live events (PROTOCOL.md section 6).
std::string EncodeStartedEvent(uint64_t seq, std::string_view worker, uint32_t attempt);
// stream is "stdout" or "stderr"
std::string EncodeOutputEvent(uint64_t seq, std::string_view stream, std::string_view data);
std::string EncodeExitedEvent(uint64_t seq, const JobResult& r);

struct Event {
  std::string type;  // "started", "stdout", "stderr", "exited", or an unknown type
  uint64_t seq = 0;
  std::string data;                  // stdout / stderr
  std::string worker;                // started
  uint32_t attempt = 0;              // started
  std::optional<JobResult> result;   // exited
};
std::optional<Event> DecodeEvent(std::string_view bytes);

}  // namespace sandpool
