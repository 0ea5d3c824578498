// libFuzzer harness: DecodeJob (queue/protocol.h), the decoder of what any client puts in Redis.
// Each input is decoded under two sets of server limits: the defaults, and tight ones a config
// file can also give (maxima below the protocol's floors among them). Properties, beyond "no
// crash, leak or UBSan report":
//  - a rejection carries a protocol error code a client can be sent, and a message;
//  - an accepted job is within the limits it was checked against (PROTOCOL.md section 3);
//  - it survives a round trip: EncodeJob of it decodes to the same spec, and encodes to the
//    same bytes again (the encoder is deterministic).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <variant>

#include "common/runtimes.h"
#include "queue/protocol.h"
#include "tests/fuzz/fuzz_check.h"

namespace sandpool {
namespace {

ServerLimits TightLimits() {
  ServerLimits l;
  l.default_timeout_ms = 50;
  l.max_timeout_ms = 100;
  l.default_output_bytes = 16;
  l.max_output_bytes = 64;
  l.max_stdin_bytes = 16;
  l.max_argv_bytes = 32;
  l.max_argv_items = 3;
  l.max_env_bytes = 24;
  l.max_env_items = 2;
  l.max_retries = 0;
  l.max_memory_bytes = 1 << 20;  // below min_memory_bytes: --memory 1M --max-memory 1M
  l.max_pids = 2;                // below min_pids: --pids 2
  l.max_cpu_time_ms = 10;
  return l;
}

bool SameSpec(const JobSpec& a, const JobSpec& b) {
  return a.version == b.version && a.id == b.id && a.argv == b.argv && a.shell == b.shell &&
         a.code == b.code && a.runtime == b.runtime && a.template_name == b.template_name &&
         a.env == b.env && a.cwd == b.cwd && a.stdin_data == b.stdin_data &&
         a.timeout_ms == b.timeout_ms && a.max_output_bytes == b.max_output_bytes &&
         a.retries == b.retries && a.memory_bytes == b.memory_bytes && a.pids == b.pids &&
         a.cpu_time_ms == b.cpu_time_ms;
}

bool NoNul(std::string_view s) { return s.find('\0') == std::string_view::npos; }

// A limit clamped to [min(floor, max), max], or 0 for "the server's default".
bool ClampedOrUnset(uint64_t v, uint64_t floor, uint64_t max) {
  return v == 0 || (v >= std::min(floor, max) && v <= max);
}

void CheckAccepted(const JobSpec& s, const ServerLimits& l) {
  FUZZ_CHECK(s.version == kProtocolVersion, "version is 1");
  FUZZ_CHECK(ValidJobId(s.id), "id is 1..128 bytes of [A-Za-z0-9._:-]");
  FUZZ_CHECK(!s.argv.empty() + s.shell.has_value() + s.code.has_value() == 1,
             "exactly one of argv, shell and code");
  FUZZ_CHECK(s.code.has_value() == !s.runtime.empty(), "code and runtime go together");
  FUZZ_CHECK(!s.code || ValidRuntime(s.runtime), "runtime is one code jobs may name");
  FUZZ_CHECK(s.template_name.empty() || ValidTemplateName(s.template_name), "template name");

  FUZZ_CHECK(s.argv.size() <= l.max_argv_items, "argv items within max_argv_items");
  uint64_t argv_bytes = 0;
  for (const std::string& a : s.argv) {
    FUZZ_CHECK(NoNul(a), "no NUL in argv");
    FUZZ_CHECK(a.size() < kMaxExecString, "argv item fits the kernel's limit");
    argv_bytes += a.size();
  }
  FUZZ_CHECK(argv_bytes <= l.max_argv_bytes, "argv bytes within max_argv_bytes");
  for (const auto* text : {&s.shell, &s.code}) {
    if (!*text) continue;
    FUZZ_CHECK(NoNul(**text), "no NUL in shell or code");
    FUZZ_CHECK((*text)->size() <= l.max_argv_bytes, "shell or code within max_argv_bytes");
  }

  FUZZ_CHECK(s.env.size() <= l.max_env_items, "env entries within max_env_items");
  std::set<std::string> names;
  uint64_t env_bytes = 0;
  for (const auto& [name, value] : s.env) {
    FUZZ_CHECK(!name.empty() && NoNul(name) && NoNul(value), "env name non-empty, no NUL");
    FUZZ_CHECK(names.insert(name).second, "env names unique");
    FUZZ_CHECK(name.size() + 1 + value.size() < kMaxExecString, "NAME=value fits the kernel");
    env_bytes += name.size() + value.size();
  }
  FUZZ_CHECK(env_bytes <= l.max_env_bytes, "env bytes within max_env_bytes");

  FUZZ_CHECK(!s.cwd.empty() && s.cwd[0] == '/' && s.cwd.size() <= 4096 && NoNul(s.cwd),
             "cwd absolute, at most 4096 bytes, no NUL");
  FUZZ_CHECK(s.stdin_data.size() <= l.max_stdin_bytes, "stdin within max_stdin_bytes");
  FUZZ_CHECK(s.timeout_ms >= 1 && s.timeout_ms <= l.max_timeout_ms, "timeout in 1..max");
  FUZZ_CHECK(s.max_output_bytes <= l.max_output_bytes, "max_output_bytes clamped");
  FUZZ_CHECK(s.retries <= l.max_retries, "retries within max_retries");
  FUZZ_CHECK(ClampedOrUnset(s.memory_bytes, l.min_memory_bytes, l.max_memory_bytes),
             "memory_bytes unset or clamped");
  FUZZ_CHECK(ClampedOrUnset(s.pids, l.min_pids, l.max_pids), "pids unset or clamped");
  FUZZ_CHECK(s.cpu_time_ms <= l.max_cpu_time_ms, "cpu_time_ms clamped");
}

void CheckOne(std::string_view bytes, const ServerLimits& limits) {
  auto decoded = DecodeJob(bytes, limits);
  if (const auto* err = std::get_if<JobError>(&decoded)) {
    // internal is what DecodeJob answers to an exception or an unhandled field: never an
    // answer to a client's bytes.
    FUZZ_CHECK(err->code == ErrorCode::kBadPayload || err->code == ErrorCode::kBadVersion ||
                   err->code == ErrorCode::kBadField || err->code == ErrorCode::kTooLarge,
               "a rejected job gets bad_payload, bad_version, bad_field or too_large");
    FUZZ_CHECK(!err->message.empty(), "a rejection says why");
    return;
  }
  const JobSpec& spec = std::get<JobSpec>(decoded);
  CheckAccepted(spec, limits);

  std::string encoded = EncodeJob(spec);
  auto again = DecodeJob(encoded, limits);
  FUZZ_CHECK(std::holds_alternative<JobSpec>(again), "a decoded job re-encoded decodes");
  const JobSpec& spec2 = std::get<JobSpec>(again);
  FUZZ_CHECK(SameSpec(spec, spec2), "a decoded job re-encoded decodes to the same spec");
  FUZZ_CHECK(EncodeJob(spec2) == encoded, "EncodeJob is deterministic");
}

}  // namespace
}  // namespace sandpool

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const sandpool::ServerLimits kDefault;
  static const sandpool::ServerLimits kTight = sandpool::TightLimits();
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  sandpool::CheckOne(bytes, kDefault);
  sandpool::CheckOne(bytes, kTight);
  return 0;
}
