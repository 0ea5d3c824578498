// Protocol v1 decoders (the encoders and names are in protocol.cc). Every input is hostile:
// msgpack is parsed with bounds on every size and on depth, every exception is caught here, and
// values are only read through their type tags.
#include <msgpack.hpp>

#include <algorithm>
#include <exception>
#include <limits>
#include <new>
#include <set>

#include "common/runtimes.h"
#include "queue/protocol.h"

namespace sandpool {
namespace {

// ---------------------------------------------------------------------------------------------
// Decoding helpers. Strings and bins are referenced in the caller's buffer instead of copied
// into the zone: the buffer outlives the object, and it halves the memory a hostile payload can
// make us use.

bool ReferenceAll(msgpack::type::object_type, std::size_t, void*) { return true; }

// Depth: job = map > argv/env (2); event = map > result > error (3). Anything deeper is invalid,
// and a small bound keeps the parser's stack small.
constexpr size_t kMaxDepth = 6;

enum class ParseFail { kNone, kMalformed, kTrailing, kTooLarge, kTooDeep, kExt, kNoMemory };

struct Parsed {
  msgpack::object_handle handle;
  ParseFail fail = ParseFail::kNone;
  std::string detail;
};

// Unpacks exactly one object spanning all of `bytes`. Never throws.
Parsed ParseOne(std::string_view bytes, const msgpack::unpack_limit& limit) {
  Parsed p;
  try {
    size_t off = 0;
    p.handle = msgpack::unpack(bytes.data(), bytes.size(), off, &ReferenceAll, nullptr, limit);
    if (off != bytes.size()) {
      p.fail = ParseFail::kTrailing;
      p.detail = std::to_string(bytes.size() - off) + " trailing bytes after the map";
    }
  } catch (const msgpack::ext_size_overflow&) {
    p.fail = ParseFail::kExt;
    p.detail = "ext value too large or not allowed";
  } catch (const msgpack::depth_size_overflow&) {
    p.fail = ParseFail::kTooDeep;
    p.detail = "nesting too deep";
  } catch (const msgpack::size_overflow& e) {
    p.fail = ParseFail::kTooLarge;
    p.detail = e.what();
  } catch (const msgpack::insufficient_bytes&) {
    p.fail = ParseFail::kMalformed;
    p.detail = "truncated msgpack";
  } catch (const std::bad_alloc&) {
    p.fail = ParseFail::kNoMemory;
    p.detail = "out of memory";
  } catch (const std::exception& e) {
    p.fail = ParseFail::kMalformed;
    p.detail = std::string("not msgpack: ") + e.what();
  } catch (...) {
    p.fail = ParseFail::kMalformed;
    p.detail = "not msgpack";
  }
  return p;
}

bool IsStr(const msgpack::object& o) { return o.type == msgpack::type::STR; }
bool IsBytes(const msgpack::object& o) {
  return o.type == msgpack::type::STR || o.type == msgpack::type::BIN;
}
bool IsUint(const msgpack::object& o) { return o.type == msgpack::type::POSITIVE_INTEGER; }

std::string_view StrOf(const msgpack::object& o) {
  return std::string_view(o.via.str.ptr, o.via.str.size);
}
std::string_view BytesOf(const msgpack::object& o) {
  return o.type == msgpack::type::BIN ? std::string_view(o.via.bin.ptr, o.via.bin.size)
                                      : StrOf(o);
}

bool HasNul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

// Strict UTF-8 (no overlongs, no surrogates, at most U+10FFFF). Text fields must be valid: the
// interpreters of code templates receive them as text, and the same job must behave the same
// in every template.
bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t extra;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      extra = 1;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      extra = 2;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i <= extra) return false;
    for (size_t k = 1; k <= extra; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if ((extra == 2 && cp < 0x800) || (extra == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

// Why a text field is unacceptable, or nullptr.
const char* BadText(std::string_view s) {
  if (HasNul(s)) return "contains NUL";
  if (!ValidUtf8(s)) return "is not valid UTF-8";
  return nullptr;
}

// Field names and values go into error messages; keep them short and printable.
std::string Quote(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 64)) {
    auto u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7f) ? c : '?';
  }
  if (s.size() > 64) out += "...";
  out += "'";
  return out;
}

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
                      kRetries, kQueue, kMemory, kPids, kCpuTime, kCode, kRuntime, kTemplate };

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
      {"template", JobField::kTemplate},
  };
  for (const auto& [name, f] : kNames) {
    if (name == k) return f;
  }
  return std::nullopt;
}

constexpr size_t kMaxCwdBytes = 4096;

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
  if (vobj->via.u64 != kProtocolVersion) {
    return Err(ErrorCode::kBadVersion, "v: unsupported version " + std::to_string(vobj->via.u64));
  }

  JobSpec spec;
  spec.version = kProtocolVersion;
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
  if (!has(JobField::kTimeout)) {
    spec.timeout_ms = std::clamp<uint64_t>(lim.default_timeout_ms, 1, lim.max_timeout_ms);
  }
  if (!has(JobField::kMaxOutput)) {
    spec.max_output_bytes = std::min(lim.default_output_bytes, lim.max_output_bytes);
  }
  return spec;
}

// ---------------------------------------------------------------------------------------------
// Tolerant decoders (results, events): unknown fields are skipped, known fields must have their
// type. Nothing here is trusted more than a job is: same parser bounds.

msgpack::unpack_limit TolerantLimit() {
  constexpr size_t kMaxStr = 64u << 20;  // above any output cap a daemon may be given
  return msgpack::unpack_limit(/*array=*/1 << 16, /*map=*/1 << 12, kMaxStr, kMaxStr,
                               /*ext=*/1 << 16, kMaxDepth);
}

bool GetU64(const msgpack::object& o, uint64_t* out) {
  if (!IsUint(o)) return false;
  *out = o.via.u64;
  return true;
}

bool GetU32(const msgpack::object& o, uint32_t* out) {
  if (!IsUint(o) || o.via.u64 > std::numeric_limits<uint32_t>::max()) return false;
  *out = static_cast<uint32_t>(o.via.u64);
  return true;
}

bool GetBool(const msgpack::object& o, bool* out) {
  if (o.type != msgpack::type::BOOLEAN) return false;
  *out = o.via.boolean;
  return true;
}

bool GetOptInt(const msgpack::object& o, std::optional<int>* out) {
  if (o.type == msgpack::type::NIL) {
    out->reset();
    return true;
  }
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<uint64_t>(std::numeric_limits<int>::max())) return false;
    *out = static_cast<int>(o.via.u64);
    return true;
  }
  if (o.type == msgpack::type::NEGATIVE_INTEGER) {
    if (o.via.i64 < std::numeric_limits<int>::min()) return false;
    *out = static_cast<int>(o.via.i64);
    return true;
  }
  return false;
}

bool GetStr(const msgpack::object& o, std::string* out) {
  if (!IsStr(o)) return false;
  *out = std::string(StrOf(o));
  return true;
}

bool GetBytes(const msgpack::object& o, std::string* out) {
  if (!IsBytes(o)) return false;
  *out = std::string(BytesOf(o));
  return true;
}

bool ReadErrorMap(const msgpack::object& o, std::optional<JobError>* out) {
  if (o.type == msgpack::type::NIL) {
    out->reset();
    return true;
  }
  if (o.type != msgpack::type::MAP) return false;
  JobError e{ErrorCode::kInternal, ""};
  bool have_code = false;
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    const auto& kv = o.via.map.ptr[i];
    if (!IsStr(kv.key)) continue;
    std::string_view k = StrOf(kv.key);
    if (k == "code") {
      if (!IsStr(kv.val)) return false;
      std::string_view name = StrOf(kv.val);
      if (auto c = ParseErrorCode(name)) {
        e.code = *c;
      } else {
        // A code from a newer protocol version: keep its name visible in the message.
        e.code = ErrorCode::kInternal;
        e.message.insert(0, "[" + std::string(name) + "] ");
      }
      have_code = true;
    } else if (k == "message") {
      if (!IsStr(kv.val)) return false;
      e.message += std::string(StrOf(kv.val));
    }
  }
  if (!have_code) return false;
  *out = std::move(e);
  return true;
}

bool ReadResultObject(const msgpack::object& root, JobResult* r) {
  if (root.type != msgpack::type::MAP) return false;
  bool have_v = false, have_id = false, have_outcome = false;
  std::string unknown_outcome;
  for (uint32_t i = 0; i < root.via.map.size; ++i) {
    const auto& kv = root.via.map.ptr[i];
    if (!IsStr(kv.key)) continue;
    std::string_view k = StrOf(kv.key);
    const msgpack::object& v = kv.val;
    bool ok = true;
    if (k == "v") {
      uint64_t ver = 0;
      ok = GetU64(v, &ver) && ver >= 1;
      have_v = true;
    } else if (k == "id") {
      ok = GetStr(v, &r->id);
      have_id = true;
    } else if (k == "outcome") {
      std::string name;
      ok = GetStr(v, &name);
      if (ok) {
        if (auto o = ParseOutcome(name)) {
          r->outcome = *o;
        } else {
          r->outcome = Outcome::kError;  // a newer daemon's outcome; report it as an error
          unknown_outcome = name;
        }
      }
      have_outcome = true;
    } else if (k == "exit_code") {
      ok = GetOptInt(v, &r->exit_code);
    } else if (k == "signal") {
      ok = GetOptInt(v, &r->signal);
    } else if (k == "timed_out") {
      ok = GetBool(v, &r->timed_out);
    } else if (k == "killed") {
      ok = GetBool(v, &r->killed);
    } else if (k == "stdout") {
      ok = GetBytes(v, &r->stdout_data);
    } else if (k == "stderr") {
      ok = GetBytes(v, &r->stderr_data);
    } else if (k == "stdout_truncated") {
      ok = GetBool(v, &r->stdout_truncated);
    } else if (k == "stderr_truncated") {
      ok = GetBool(v, &r->stderr_truncated);
    } else if (k == "stdout_dropped_bytes") {
      ok = GetU64(v, &r->stdout_dropped_bytes);
    } else if (k == "stderr_dropped_bytes") {
      ok = GetU64(v, &r->stderr_dropped_bytes);
    } else if (k == "exec_time_us") {
      ok = GetU64(v, &r->exec_time_us);
    } else if (k == "cpu_time_us") {
      ok = GetU64(v, &r->cpu_time_us);
    } else if (k == "peak_memory_bytes") {
      ok = GetU64(v, &r->peak_memory_bytes);
    } else if (k == "queue_wait_us") {
      ok = GetU64(v, &r->queue_wait_us);
    } else if (k == "worker") {
      ok = GetStr(v, &r->worker);
    } else if (k == "attempt") {
      ok = GetU32(v, &r->attempt);
    } else if (k == "error") {
      ok = ReadErrorMap(v, &r->error);
    }
    if (!ok) return false;
  }
  if (!have_v || !have_id || !have_outcome) return false;
  if (!unknown_outcome.empty() && !r->error) {
    r->error = JobError{ErrorCode::kInternal, "unknown outcome " + Quote(unknown_outcome)};
  }
  return true;
}

bool ReadEventObject(const msgpack::object& root, Event* ev) {
  if (root.type != msgpack::type::MAP) return false;
  bool have_v = false, have_type = false, have_seq = false, have_data = false;
  const msgpack::object* result = nullptr;
  for (uint32_t i = 0; i < root.via.map.size; ++i) {
    const auto& kv = root.via.map.ptr[i];
    if (!IsStr(kv.key)) continue;
    std::string_view k = StrOf(kv.key);
    const msgpack::object& v = kv.val;
    bool ok = true;
    if (k == "v") {
      uint64_t ver = 0;
      ok = GetU64(v, &ver) && ver >= 1;
      have_v = true;
    } else if (k == "type") {
      ok = GetStr(v, &ev->type);
      have_type = true;
    } else if (k == "seq") {
      ok = GetU64(v, &ev->seq);
      have_seq = true;
    } else if (k == "data") {
      ok = GetBytes(v, &ev->data);
      have_data = true;
    } else if (k == "worker") {
      ok = GetStr(v, &ev->worker);
    } else if (k == "attempt") {
      ok = GetU32(v, &ev->attempt);
    } else if (k == "result") {
      result = &v;
    }
    if (!ok) return false;
  }
  if (!have_v || !have_type || !have_seq) return false;
  if ((ev->type == "stdout" || ev->type == "stderr") && !have_data) return false;
  if (ev->type == "exited") {
    if (!result) return false;
    JobResult r;
    if (!ReadResultObject(*result, &r)) return false;
    ev->result = std::move(r);
  }
  return true;
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

std::optional<JobResult> DecodeResult(std::string_view bytes) {
  try {
    Parsed p = ParseOne(bytes, TolerantLimit());
    if (p.fail != ParseFail::kNone) return std::nullopt;
    JobResult r;
    if (!ReadResultObject(p.handle.get(), &r)) return std::nullopt;
    return r;
  } catch (...) {
    return std::nullopt;
  }
}

std::optional<Event> DecodeEvent(std::string_view bytes) {
  try {
    Parsed p = ParseOne(bytes, TolerantLimit());
    if (p.fail != ParseFail::kNone) return std::nullopt;
    Event ev;
    if (!ReadEventObject(p.handle.get(), &ev)) return std::nullopt;
    return ev;
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace sandpool
