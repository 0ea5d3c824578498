// Protocol v1 job maps (and the job fields of v2 session requests): decoding and validation.
// Every input is hostile (queue/msgpack_read.h).
#include <algorithm>
#include <set>

#include "common/egress_rules.h"
#include "common/runtimes.h"
#include "queue/job_fields.h"
#include "queue/msgpack_read.h"
#include "queue/protocol.h"

#include "common/egress_rules.h"

namespace sandpool {
namespace {

using namespace mpk;

bool ValidEnvName(std::string_view n) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) return false;
  }
  return true;
}

JobError Err(ErrorCode c, std::string msg) { return JobError{c, std::move(msg)}; }

// Every key of the job map, in one place so that "unknown field" is exact.
enum class JobField { kV, kId, kArgv, kShell, kEnv, kCwd, kStdin, kTimeout, kMaxOutput,
                      kRetries, kQueue, kMemory, kPids, kCpuTime, kCode, kRuntime, kTemplate, kEgress };

std::optional<JobField> ParseJobField(std::string_view k) {
  static constexpr std::pair<std::string_view, JobField> kNames[] = {
      {"v", JobField::kV},           {"id", JobField::kId},
      {"argv", JobField::kArgv},     {"shell", JobField::kShell},
      {"env", JobField::kEnv},       {"cwd", JobField::kCwd},
      {"stdin", JobField::kStdin},   {"timeout_ms", JobField::kTimeout},
      {"max_output_bytes", JobField::kMaxOutput},
      {"retries", JobField::kRetries}, {"queue", JobField::kQueue},
      {"memory_bytes", JobField::kMemory}, {"pids", JobField::kPids},
      {"cpu_time_ms", JobField::kCpuTime},
      {"code", JobField::kCode},      {"runtime", JobField::kRuntime},
      {"template", JobField::kTemplate}, {"egress", JobField::kEgress},
  };
  for (const auto& [name, f] : kNames) {
    if (name == k) return f;
  }
  return std::nullopt;
}

constexpr size_t kMaxCwdBytes = 4096;

// `egress` (version 3): {allow: [rule], deny: [rule]}, both optional; rules as common/
// egress_rules.h reads them, kept in canonical form.
std::optional<JobError> DecodeEgress(const msgpack::object& v, JobSpec& spec) {
  if (spec.version < 3) return Err(ErrorCode::kBadField, "unknown field \"egress\" (a version 3 field: send v 3)");
  if (v.type != msgpack::type::MAP) return Err(ErrorCode::kBadField, "egress: not a map");
  EgressRequest req;
  for (uint32_t i = 0; i < v.via.map.size; ++i) {
    const auto& kv = v.via.map.ptr[i];
    std::string_view k = IsStr(kv.key) ? StrOf(kv.key) : std::string_view();
    if (k != "allow" && k != "deny") return Err(ErrorCode::kBadField, "egress: only allow and deny");
    if (kv.val.type != msgpack::type::ARRAY || kv.val.via.array.size > kMaxEgressRules) {
      return Err(ErrorCode::kBadField, "egress." + std::string(k) + ": an array of at most 256 rules");
    }
    std::vector<std::string> texts;
    for (uint32_t j = 0; j < kv.val.via.array.size; ++j) {
      std::string t;
      if (!GetStr(kv.val.via.array.ptr[j], &t)) return Err(ErrorCode::kBadField, "egress." + std::string(k) + ": rules are strings");
      texts.push_back(std::move(t));
    }
    auto rules = ParseEgressRules(texts, "egress." + std::string(k));
    if (!rules.ok()) return Err(ErrorCode::kBadField, rules.status().message());
    std::vector<std::string> canonical;
    for (const EgressRule& r : *rules) canonical.push_back(r.ToString());
    if (k == "allow") req.allow = std::move(canonical);
    else req.deny = std::move(canonical);
  }
  spec.egress = std::move(req);
  return std::nullopt;
}

// Validates one field's value into `spec`. Returns an error or nullopt.
std::optional<JobError> ApplyJobField(JobField f, std::string_view name, const msgpack::object& v,
                                      const ServerLimits& lim, JobSpec& spec) {
  switch (f) {
    case JobField::kV:
      return std::nullopt;  // checked before everything else
    case JobField::kId:
      if (!IsStr(v)) return Err(ErrorCode::kBadField, "id: not a string");
      if (!ValidJobId(StrOf(v))) {
        return Err(ErrorCode::kBadField, "id: must be 1..128 bytes of [A-Za-z0-9._:-]");
      }
      spec.id = std::string(StrOf(v));
      return std::nullopt;
    case JobField::kArgv: {
      if (v.type != msgpack::type::ARRAY) return Err(ErrorCode::kBadField, "argv: not an array");
      const auto& a = v.via.array;
      if (a.size == 0) return Err(ErrorCode::kBadField, "argv: empty");
      if (a.size > lim.max_argv_items) {
        return Err(ErrorCode::kTooLarge, "argv: more than " + std::to_string(lim.max_argv_items) +
                                             " elements");
      }
      uint64_t total = 0;
      for (uint32_t i = 0; i < a.size; ++i) {
        if (!IsStr(a.ptr[i])) {
          return Err(ErrorCode::kBadField, "argv[" + std::to_string(i) + "]: not a string");
        }
        std::string_view s = StrOf(a.ptr[i]);
        if (const char* why = BadText(s)) {
          return Err(ErrorCode::kBadField, "argv[" + std::to_string(i) + "]: " + why);
        }
        if (s.size() >= kMaxExecString) {
          return Err(ErrorCode::kTooLarge, "argv[" + std::to_string(i) + "]: more than " +
                                               std::to_string(kMaxExecString - 1) +
                                               " bytes (the kernel's limit for one argument)");
        }
        total += s.size();
      }
      if (total > lim.max_argv_bytes) {
        return Err(ErrorCode::kTooLarge,
                   "argv: more than " + std::to_string(lim.max_argv_bytes) + " bytes in total");
      }
      spec.argv.reserve(a.size);
      for (uint32_t i = 0; i < a.size; ++i) spec.argv.emplace_back(StrOf(a.ptr[i]));
      return std::nullopt;
    }
    case JobField::kShell: {
      if (!IsStr(v)) return Err(ErrorCode::kBadField, "shell: not a string");
      std::string_view s = StrOf(v);
      if (s.size() > lim.max_argv_bytes) {
        return Err(ErrorCode::kTooLarge,
                   "shell: more than " + std::to_string(lim.max_argv_bytes) + " bytes");
      }
      if (const char* why = BadText(s)) return Err(ErrorCode::kBadField, std::string("shell: ") + why);
      spec.shell = std::string(s);
      return std::nullopt;
    }
    case JobField::kCode: {
      if (!IsStr(v)) return Err(ErrorCode::kBadField, "code: not a string");
      std::string_view s = StrOf(v);
      if (s.size() > lim.max_argv_bytes) {
        return Err(ErrorCode::kTooLarge, "code: more than " + std::to_string(lim.max_argv_bytes) + " bytes");
      }
      if (const char* why = BadText(s)) return Err(ErrorCode::kBadField, std::string("code: ") + why);
      spec.code = std::string(s);
      return std::nullopt;
    }
    case JobField::kRuntime:
      if (!IsStr(v) || !ValidRuntime(StrOf(v))) {
        return Err(ErrorCode::kBadField, "runtime: must be \"python\", \"node\" or \"bash\"");
      }
      spec.runtime = std::string(StrOf(v));
      return std::nullopt;
    case JobField::kEgress:
      return DecodeEgress(v, spec);
    case JobField::kTemplate:
      if (!IsStr(v) || !ValidTemplateName(StrOf(v))) {
        return Err(ErrorCode::kBadField, "template: 1..64 characters of [A-Za-z0-9._-]");
      }
      spec.template_name = std::string(StrOf(v));
      return std::nullopt;
    case JobField::kEnv: {
      if (v.type != msgpack::type::MAP) return Err(ErrorCode::kBadField, "env: not a map");
      const auto& m = v.via.map;
      if (m.size > lim.max_env_items) {
        return Err(ErrorCode::kTooLarge,
                   "env: more than " + std::to_string(lim.max_env_items) + " entries");
      }
      uint64_t total = 0;
      std::set<std::string_view> seen;
      for (uint32_t i = 0; i < m.size; ++i) {
        const auto& kv = m.ptr[i];
        if (!IsStr(kv.key)) return Err(ErrorCode::kBadField, "env: a name is not a string");
        std::string_view k = StrOf(kv.key);
        if (!ValidEnvName(k)) {
          return Err(ErrorCode::kBadField,
                     "env: invalid name " + Quote(k) + " (want [A-Za-z_][A-Za-z0-9_]*)");
        }
        if (!IsStr(kv.val)) return Err(ErrorCode::kBadField, "env." + std::string(k) + ": not a string");
        std::string_view val = StrOf(kv.val);
        if (const char* why = BadText(val)) return Err(ErrorCode::kBadField, "env." + std::string(k) + ": " + why);
        if (!seen.insert(k).second) {
          return Err(ErrorCode::kBadField, "env: duplicate name " + std::string(k));
        }
        if (k.size() + 1 + val.size() >= kMaxExecString) {
          return Err(ErrorCode::kTooLarge, "env." + std::string(k) + ": NAME=value is more than " +
                                               std::to_string(kMaxExecString - 1) +
                                               " bytes (the kernel's limit for one variable)");
        }
        total += k.size() + val.size();
      }
      if (total > lim.max_env_bytes) {
        return Err(ErrorCode::kTooLarge,
                   "env: more than " + std::to_string(lim.max_env_bytes) + " bytes in total");
      }
      spec.env.reserve(m.size);
      for (uint32_t i = 0; i < m.size; ++i) {
        spec.env.emplace_back(std::string(StrOf(m.ptr[i].key)), std::string(StrOf(m.ptr[i].val)));
      }
      return std::nullopt;
    }
    case JobField::kCwd: {
      if (!IsStr(v)) return Err(ErrorCode::kBadField, "cwd: not a string");
      std::string_view s = StrOf(v);
      if (s.empty() || s[0] != '/') return Err(ErrorCode::kBadField, "cwd: not an absolute path");
      if (const char* why = BadText(s)) return Err(ErrorCode::kBadField, std::string("cwd: ") + why);
      if (s.size() > kMaxCwdBytes) {
        return Err(ErrorCode::kBadField, "cwd: longer than " + std::to_string(kMaxCwdBytes));
      }
      spec.cwd = std::string(s);
      return std::nullopt;
    }
    case JobField::kStdin: {
      if (!IsBytes(v)) return Err(ErrorCode::kBadField, "stdin: not bytes");
      std::string_view s = BytesOf(v);
      if (s.size() > lim.max_stdin_bytes) {
        return Err(ErrorCode::kTooLarge,
                   "stdin: more than " + std::to_string(lim.max_stdin_bytes) + " bytes");
      }
      spec.stdin_data = std::string(s);
      return std::nullopt;
    }
    case JobField::kTimeout:
      if (!IsUint(v)) return Err(ErrorCode::kBadField, "timeout_ms: not a uint");
      if (v.via.u64 == 0) return Err(ErrorCode::kBadField, "timeout_ms: must be at least 1");
      spec.timeout_ms = std::min<uint64_t>(v.via.u64, lim.max_timeout_ms);
      return std::nullopt;
    case JobField::kMaxOutput:
      if (!IsUint(v)) return Err(ErrorCode::kBadField, "max_output_bytes: not a uint");
      spec.max_output_bytes = std::min<uint64_t>(v.via.u64, lim.max_output_bytes);
      return std::nullopt;
    case JobField::kRetries:
      if (!IsUint(v)) return Err(ErrorCode::kBadField, "retries: not a uint");
      if (v.via.u64 > lim.max_retries) {
        return Err(ErrorCode::kBadField,
                   "retries: more than " + std::to_string(lim.max_retries));
      }
      spec.retries = static_cast<uint32_t>(v.via.u64);
      return std::nullopt;
    case JobField::kQueue:
      if (!IsStr(v)) return Err(ErrorCode::kBadField, "queue: not a string");
      return std::nullopt;  // informational only
    case JobField::kMemory:
      if (!IsUint(v) || v.via.u64 == 0) return Err(ErrorCode::kBadField, "memory_bytes: not a positive uint");
      spec.memory_bytes = std::clamp<uint64_t>(v.via.u64, std::min(lim.min_memory_bytes, lim.max_memory_bytes), lim.max_memory_bytes);
      return std::nullopt;
    case JobField::kPids:
      if (!IsUint(v) || v.via.u64 == 0) return Err(ErrorCode::kBadField, "pids: not a positive uint");
      spec.pids = std::clamp<uint64_t>(v.via.u64, std::min(lim.min_pids, lim.max_pids), lim.max_pids);
      return std::nullopt;
    case JobField::kCpuTime:
      if (!IsUint(v) || v.via.u64 == 0) return Err(ErrorCode::kBadField, "cpu_time_ms: not a positive uint");
      spec.cpu_time_ms = std::min<uint64_t>(v.via.u64, lim.max_cpu_time_ms);
      return std::nullopt;
  }
  return Err(ErrorCode::kInternal, "unhandled field " + std::string(name));
}

std::variant<JobSpec, JobError> DecodeJobImpl(std::string_view payload, const ServerLimits& lim) {
  // Structural bounds, checked by the parser before it allocates anything for a container or
  // string. They are a little above the semantic limits so that the precise checks below
  // produce the precise message; anything past them can only be an oversized payload.
  uint64_t max_str = std::max({lim.max_argv_bytes, lim.max_env_bytes, lim.max_stdin_bytes,
                               uint64_t{kMaxCwdBytes}}) + 1;
  msgpack::unpack_limit limit(
      /*array=*/static_cast<size_t>(lim.max_argv_items + 1),
      /*map=*/static_cast<size_t>(std::max<uint64_t>(lim.max_env_items, 64) + 1),
      /*str=*/static_cast<size_t>(max_str),
      /*bin=*/static_cast<size_t>(lim.max_stdin_bytes + 1),
      /*ext=*/0, kMaxDepth);
  Parsed p = ParseOne(payload, limit);
  switch (p.fail) {
    case ParseFail::kNone:
      break;
    case ParseFail::kMalformed:
    case ParseFail::kTrailing:
      return Err(ErrorCode::kBadPayload, p.detail);
    case ParseFail::kTooLarge:
      return Err(ErrorCode::kTooLarge, p.detail);
    case ParseFail::kExt:
      // No job field is an ext, and the ext limit is 0: this is a type error, not a size one.
      return Err(ErrorCode::kBadField, "ext values are not allowed in a job");
    case ParseFail::kTooDeep:
      return Err(ErrorCode::kBadField, p.detail);
    case ParseFail::kNoMemory:
      return Err(ErrorCode::kTooLarge, p.detail);
  }
  const msgpack::object& root = p.handle.get();
  if (root.type != msgpack::type::MAP) return Err(ErrorCode::kBadPayload, "not a map");
  const auto& m = root.via.map;

  // The version decides how to read everything else, so it is checked first.
  const msgpack::object* vobj = nullptr;
  for (uint32_t i = 0; i < m.size; ++i) {
    if (IsStr(m.ptr[i].key) && StrOf(m.ptr[i].key) == "v") {
      vobj = &m.ptr[i].val;
      break;
    }
  }
  if (!vobj) return Err(ErrorCode::kBadVersion, "v: missing");
  if (!IsUint(*vobj)) return Err(ErrorCode::kBadVersion, "v: not a uint");
  if (vobj->via.u64 < 1 || vobj->via.u64 > kMaxProtocolVersion) {
    return Err(ErrorCode::kBadVersion, "v: unsupported version " + std::to_string(vobj->via.u64));
  }

  JobSpec spec;
  spec.version = static_cast<uint32_t>(vobj->via.u64);
  uint32_t seen = 0;  // bit per JobField
  for (uint32_t i = 0; i < m.size; ++i) {
    const auto& kv = m.ptr[i];
    if (!IsStr(kv.key)) return Err(ErrorCode::kBadField, "a field name is not a string");
    std::string_view name = StrOf(kv.key);
    std::optional<JobField> f = ParseJobField(name);
    if (!f) return Err(ErrorCode::kBadField, "unknown field " + Quote(name));
    uint32_t bit = 1u << static_cast<int>(*f);
    if (seen & bit) return Err(ErrorCode::kBadField, "duplicate field " + std::string(name));
    seen |= bit;
    if (auto e = ApplyJobField(*f, name, kv.val, lim, spec)) return *std::move(e);
  }
  auto has = [&](JobField f) { return (seen & (1u << static_cast<int>(f))) != 0; };
  if (!has(JobField::kId)) return Err(ErrorCode::kBadField, "id: missing");
  if (has(JobField::kArgv) + has(JobField::kShell) + has(JobField::kCode) != 1) {
    return Err(ErrorCode::kBadField, "exactly one of argv, shell and code is required");
  }
  if (has(JobField::kCode) != has(JobField::kRuntime)) {
    return Err(ErrorCode::kBadField, "code and runtime go together");
  }
  DefaultJobLimits(spec, lim, has(JobField::kTimeout), has(JobField::kMaxOutput));
  return spec;
}


}  // namespace

bool ValidJobId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::variant<std::string, JobError> EntryNotifyTarget(std::string_view notify, std::string_view notify_result,
                                                      bool has_notify, bool has_notify_result) {
  if (has_notify_result && notify_result != "1" && notify_result != "0") {
    return JobError{ErrorCode::kBadField, "notify_result: must be \"1\" or \"0\""};
  }
  if (!has_notify) {
    if (has_notify_result) return JobError{ErrorCode::kBadField, "notify_result: needs a notify field"};
    return std::string();
  }
  if (!ValidJobId(notify)) {
    return JobError{ErrorCode::kBadField, "notify: not a valid stream name (1 to 128 bytes of [A-Za-z0-9._:-])"};
  }
  std::string target(notify);
  if (notify_result == "1") target += '!';
  return target;
}

void DefaultJobLimits(JobSpec& spec, const ServerLimits& lim, bool has_timeout, bool has_max_output) {
  if (!has_timeout) spec.timeout_ms = std::clamp<uint64_t>(lim.default_timeout_ms, 1, lim.max_timeout_ms);
  if (!has_max_output) spec.max_output_bytes = std::min(lim.default_output_bytes, lim.max_output_bytes);
}

std::optional<JobError> DecodeJobField(std::string_view name, const msgpack::object& value, const ServerLimits& limits,
                                       JobSpec& spec, bool* known) {
  std::optional<JobField> f = ParseJobField(name);
  *known = f.has_value();
  if (!f || *f == JobField::kV || *f == JobField::kId) return std::nullopt;
  return ApplyJobField(*f, name, value, limits, spec);
}

std::variant<JobSpec, JobError> DecodeJob(std::string_view payload, const ServerLimits& limits) {
  // The validation code only touches msgpack objects through their tagged fields, but string
  // copies can still throw bad_alloc; nothing may escape.
  try {
    return DecodeJobImpl(payload, limits);
  } catch (const std::bad_alloc&) {
    return Err(ErrorCode::kTooLarge, "out of memory decoding the job");
  } catch (...) {
    return Err(ErrorCode::kInternal, "unexpected exception decoding the job");
  }
}

}  // namespace sandpool
