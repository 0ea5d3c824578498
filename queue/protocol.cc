// Protocol v1: names, exit codes and the encoders. The decoders are in protocol_decode.cc.
#include "queue/protocol.h"

#include <msgpack.hpp>

#include <algorithm>

#include "common/runtimes.h"
#include "queue/result_fields.h"

namespace sandpool {
namespace {

// ---------------------------------------------------------------------------------------------
// Encoding helpers. The packer writes straight into a std::string; msgpack picks the smallest
// encoding for every integer, which the test vectors (PROTOCOL.md section 11) rely on.

struct StringSink {
  std::string* out;
  void write(const char* p, size_t n) { out->append(p, n); }
};
using Packer = msgpack::packer<StringSink>;

void PackStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void PackBin(Packer& pk, std::string_view s) {
  pk.pack_bin(static_cast<uint32_t>(s.size()));
  pk.pack_bin_body(s.data(), static_cast<uint32_t>(s.size()));
}

void PackBool(Packer& pk, bool b) {
  if (b) {
    pk.pack_true();
  } else {
    pk.pack_false();
  }
}

void PackOptInt(Packer& pk, const std::optional<int>& v) {
  if (v) {
    pk.pack_int64(*v);
  } else {
    pk.pack_nil();
  }
}

// Packs each field of VisitResultFields.
struct ResultPacker {
  Packer& pk;
  void Key(const char* name) { PackStr(pk, name); }
  void Str(const char* n, const std::string& s) { Key(n), PackStr(pk, s); }
  void Bytes(const char* n, const std::string& s) { Key(n), PackBin(pk, s); }
  void Bool(const char* n, bool b) { Key(n), PackBool(pk, b); }
  void U64(const char* n, uint64_t u) { Key(n), pk.pack_uint64(u); }
  void U32(const char* n, uint32_t u) { Key(n), pk.pack_uint64(u); }
  void OptInt(const char* n, const std::optional<int>& i) { Key(n), PackOptInt(pk, i); }
  void Outcome(const char* n, sandpool::Outcome o) { Key(n), PackStr(pk, OutcomeName(o)); }
  void Error(const char* n, const std::optional<JobError>& e) {
    Key(n);
    if (!e) {
      pk.pack_nil();
      return;
    }
    pk.pack_map(3);
    PackStr(pk, "code");
    PackStr(pk, ErrorCodeName(e->code));
    PackStr(pk, "message");
    PackStr(pk, e->message);
    PackStr(pk, "retryable");
    PackBool(pk, ErrorCodeRetryable(e->code));
  }
  void Network(const char* n, const std::optional<NetworkInfo>& net) {
    if (!net) return;  // left out of the map
    Key(n);
    PackNetworkInfo(pk, *net);
  }
};

void PackResult(Packer& pk, const JobResult& r) {
  pk.pack_map(static_cast<uint32_t>(1 + kResultFieldCount - (r.network ? 0 : 1)));
  PackStr(pk, "v");
  pk.pack_uint64(kProtocolVersion);
  VisitResultFields(r, ResultPacker{pk});
}

// Common head of every event: v, type, seq (in that order, as the started vector requires).
void PackEventHead(Packer& pk, uint32_t fields, std::string_view type, uint64_t seq) {
  pk.pack_map(fields);
  PackStr(pk, "v");
  pk.pack_uint64(kProtocolVersion);
  PackStr(pk, "type");
  PackStr(pk, type);
  PackStr(pk, "seq");
  pk.pack_uint64(seq);
}

std::string EncodeJobImpl(const JobSpec& spec, bool send_max_output) {
  std::string out;
  StringSink sink{&out};
  Packer pk(sink);
  // Fields equal to their protocol default are left out so the map stays small; timeout_ms 0 is
  // not a valid value and means "let the server choose".
  uint32_t n = 3;  // v, id, argv|shell|code
  if (spec.code) ++n;  // runtime
  if (!spec.template_name.empty()) ++n;
  if (!spec.env.empty()) ++n;
  if (spec.cwd != "/work") ++n;
  if (!spec.stdin_data.empty()) ++n;
  if (spec.timeout_ms != 0) ++n;
  if (send_max_output) ++n;
  if (spec.retries != 0) ++n;
  n += (spec.memory_bytes != 0) + (spec.pids != 0) + (spec.cpu_time_ms != 0);
  if (spec.egress) ++n;
  pk.pack_map(n);
  PackStr(pk, "v");
  pk.pack_uint64(spec.version);
  PackStr(pk, "id");
  PackStr(pk, spec.id);
  if (spec.shell) {
    PackStr(pk, "shell");
    PackStr(pk, *spec.shell);
  } else if (spec.code) {
    PackStr(pk, "code");
    PackStr(pk, *spec.code);
    PackStr(pk, "runtime");
    PackStr(pk, spec.runtime);
  } else {
    PackStr(pk, "argv");
    pk.pack_array(static_cast<uint32_t>(spec.argv.size()));
    for (const auto& a : spec.argv) PackStr(pk, a);
  }
  if (!spec.env.empty()) {
    PackStr(pk, "env");
    pk.pack_map(static_cast<uint32_t>(spec.env.size()));
    for (const auto& [k, v] : spec.env) {
      PackStr(pk, k);
      PackStr(pk, v);
    }
  }
  if (spec.cwd != "/work") {
    PackStr(pk, "cwd");
    PackStr(pk, spec.cwd);
  }
  if (!spec.stdin_data.empty()) {
    PackStr(pk, "stdin");
    PackBin(pk, spec.stdin_data);
  }
  if (spec.timeout_ms != 0) {
    PackStr(pk, "timeout_ms");
    pk.pack_uint64(spec.timeout_ms);
  }
  if (send_max_output) {
    PackStr(pk, "max_output_bytes");
    pk.pack_uint64(spec.max_output_bytes);
  }
  if (spec.retries != 0) {
    PackStr(pk, "retries");
    pk.pack_uint64(spec.retries);
  }
  if (!spec.template_name.empty()) {
    PackStr(pk, "template");
    PackStr(pk, spec.template_name);
  }
  for (const auto& [name, value] : {std::pair<const char*, uint64_t>{"memory_bytes", spec.memory_bytes},
                                    {"pids", spec.pids}, {"cpu_time_ms", spec.cpu_time_ms}}) {
    if (value == 0) continue;
    PackStr(pk, name);
    pk.pack_uint64(value);
  }
  if (spec.egress) {  // a version 3 field: the caller sets version 3
    PackStr(pk, "egress");
    pk.pack_map(spec.egress->allow ? 2 : 1);
    if (spec.egress->allow) {
      PackStr(pk, "allow");
      pk.pack_array(static_cast<uint32_t>(spec.egress->allow->size()));
      for (const std::string& r : *spec.egress->allow) PackStr(pk, r);
    }
    PackStr(pk, "deny");
    pk.pack_array(static_cast<uint32_t>(spec.egress->deny.size()));
    for (const std::string& r : spec.egress->deny) PackStr(pk, r);
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

bool ValidRuntime(std::string_view runtime) {
  const RuntimeInfo* r = FindRuntime(runtime);
  return r != nullptr && r->code_jobs;
}

bool ValidTemplateName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

namespace {

// Every error code: its name on the wire, and whether retrying (with a new id) may help.
struct ErrorCodeInfo {
  ErrorCode code;
  std::string_view name;
  bool retryable;
};
constexpr ErrorCodeInfo kErrorCodes[] = {
    {ErrorCode::kBadPayload, "bad_payload", false},
    {ErrorCode::kBadVersion, "bad_version", false},
    {ErrorCode::kBadField, "bad_field", false},
    {ErrorCode::kTooLarge, "too_large", false},
    {ErrorCode::kExecFailed, "exec_failed", false},
    {ErrorCode::kCancelled, "cancelled", false},
    {ErrorCode::kWorkerLost, "worker_lost", true},
    {ErrorCode::kSandboxFailed, "sandbox_failed", true},
    {ErrorCode::kShutdown, "shutdown", true},
    {ErrorCode::kInternal, "internal", true},
    {ErrorCode::kSessionNotFound, "session_not_found", false},
    {ErrorCode::kSessionLost, "session_lost", false},
    {ErrorCode::kSessionStopped, "session_stopped", false},
    {ErrorCode::kSessionBusy, "session_busy", true},
    {ErrorCode::kHostFull, "host_full", true},
    {ErrorCode::kTemplateMismatch, "template_mismatch", false},
    {ErrorCode::kNotFound, "not_found", false},
    {ErrorCode::kExists, "exists", false},
    {ErrorCode::kIsADirectory, "is_a_directory", false},
    {ErrorCode::kNotADirectory, "not_a_directory", false},
    {ErrorCode::kNotAFile, "not_a_file", false},
    {ErrorCode::kNotEmpty, "not_empty", false},
    {ErrorCode::kPermission, "permission", false},
    {ErrorCode::kNoSpace, "no_space", false},
    {ErrorCode::kConflict, "conflict", false},
    {ErrorCode::kProcessExited, "process_exited", false},
    {ErrorCode::kUnsupported, "unsupported", false},
};

const ErrorCodeInfo& InfoOf(ErrorCode code) {
  for (const ErrorCodeInfo& e : kErrorCodes) {
    if (e.code == code) return e;
  }
  return kErrorCodes[9];  // internal
}

}  // namespace

std::string_view ErrorCodeName(ErrorCode code) { return InfoOf(code).name; }

bool ErrorCodeRetryable(ErrorCode code) { return InfoOf(code).retryable; }

std::optional<ErrorCode> ParseErrorCode(std::string_view name) {
  for (const ErrorCodeInfo& e : kErrorCodes) {
    if (e.name == name) return e.code;
  }
  return std::nullopt;
}

std::string EncodeJob(const JobSpec& spec) { return EncodeJobImpl(spec, true); }

std::string EncodeJobRequest(const JobSpec& spec, bool send_max_output_bytes) {
  return EncodeJobImpl(spec, send_max_output_bytes);
}

std::string_view OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kExit: return "exit";
    case Outcome::kSignal: return "signal";
    case Outcome::kTimeout: return "timeout";
    case Outcome::kCancelled: return "cancelled";
    case Outcome::kOutputLimit: return "output_limit";
    case Outcome::kMemoryLimit: return "memory_limit";
    case Outcome::kPidsLimit: return "pids_limit";
    case Outcome::kCpuLimit: return "cpu_limit";
    case Outcome::kDiskLimit: return "disk_limit";
    case Outcome::kSeccomp: return "seccomp";
    case Outcome::kWorkerLost: return "worker_lost";
    case Outcome::kError: return "error";
  }
  return "error";
}

std::optional<Outcome> ParseOutcome(std::string_view name) {
  for (int i = 0; i < kOutcomeCount; ++i) {
    auto o = static_cast<Outcome>(i);
    if (OutcomeName(o) == name) return o;
  }
  return std::nullopt;
}

int CliExitCode(Outcome o, std::optional<int> exit_code, std::optional<int> signal) {
  // Exit statuses are 8 bits; anything else from a confused daemon becomes 125 (our failure).
  auto status_or = [](std::optional<int> c, int fallback) {
    return c && *c >= 0 && *c <= 255 ? *c : fallback;
  };
  switch (o) {
    case Outcome::kExit: return status_or(exit_code, 125);
    case Outcome::kSignal:
      return signal && *signal > 0 && *signal < 128 ? 128 + *signal : 125;
    case Outcome::kTimeout: return 124;
    case Outcome::kCancelled: return 130;
    case Outcome::kOutputLimit:
    case Outcome::kMemoryLimit:
    case Outcome::kCpuLimit: return 137;
    case Outcome::kPidsLimit: return status_or(exit_code, 137);
    case Outcome::kDiskLimit:
      if (exit_code) return status_or(exit_code, 125);
      return signal && *signal > 0 && *signal < 128 ? 128 + *signal : 125;
    case Outcome::kSeccomp: return 159;
    case Outcome::kWorkerLost: return 125;
    // exec_failed carries the shell's 127 (not found) / 126 (not executable); other errors 125.
    case Outcome::kError: return status_or(exit_code, 125);
  }
  return 125;
}

std::string EncodeResult(const JobResult& r) {
  std::string out;
  StringSink sink{&out};
  Packer pk(sink);
  PackResult(pk, r);
  return out;
}

std::string EncodeStartedEvent(uint64_t seq, std::string_view worker, uint32_t attempt) {
  std::string out;
  StringSink sink{&out};
  Packer pk(sink);
  PackEventHead(pk, 5, "started", seq);
  PackStr(pk, "worker");
  PackStr(pk, worker);
  PackStr(pk, "attempt");
  pk.pack_uint64(attempt);
  return out;
}

std::string EncodeOutputEvent(uint64_t seq, std::string_view stream, std::string_view data) {
  std::string out;
  out.reserve(data.size() + 32);
  StringSink sink{&out};
  Packer pk(sink);
  PackEventHead(pk, 4, stream, seq);
  PackStr(pk, "data");
  PackBin(pk, data);
  return out;
}

std::string EncodeExitedEvent(uint64_t seq, const JobResult& r) {
  std::string out;
  out.reserve(r.stdout_data.size() + r.stderr_data.size() + 512);
  StringSink sink{&out};
  Packer pk(sink);
  PackEventHead(pk, 4, "exited", seq);
  PackStr(pk, "result");
  PackResult(pk, r);
  return out;
}

}  // namespace sandpool
