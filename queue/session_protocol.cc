// Protocol v2: session requests (decoded and validated here; the fields of file operations by the
// session's agent, which does them) and operation results.
#include "queue/session_protocol.h"

#include <algorithm>
#include <cmath>

#include "queue/job_fields.h"
#include "queue/msgpack_read.h"
#include "common/string_sink.h"

namespace sandpool {
namespace {

using namespace mpk;
using Packer = msgpack::packer<StringSink>;

constexpr SessionOpInfo kSessionOps[] = {
    {"create", SessionOp::kCreate, false, false},
    {"info", SessionOp::kInfo, false, false},
    {"stop", SessionOp::kStop, false, false},
    {"destroy", SessionOp::kDestroy, false, false},
    {"snapshot", SessionOp::kSnapshot, false, false},
    {"snapshot_delete", SessionOp::kSnapshotDelete, false, false},
    {"exec", SessionOp::kExec, false, true},
    {"code", SessionOp::kCode, false, true},
    {"context_restart", SessionOp::kContextRestart, false, true},
    {"spawn", SessionOp::kSpawn, false, true},
    {"ps", SessionOp::kPs, false, true},
    {"output", SessionOp::kOutput, false, true},
    {"stdin", SessionOp::kStdin, false, true},
    {"kill", SessionOp::kKill, false, true},
    {"write", SessionOp::kWrite, true, true},
    {"append", SessionOp::kAppend, true, true},
    {"read", SessionOp::kRead, true, true},
    {"list", SessionOp::kList, true, true},
    {"stat", SessionOp::kStat, true, true},
    {"exists", SessionOp::kExists, true, true},
    {"mkdir", SessionOp::kMkdir, true, true},
    {"remove", SessionOp::kRemove, true, true},
    {"copy", SessionOp::kCopy, true, true},
    {"rename", SessionOp::kRename, true, true},
    {"expose", SessionOp::kExpose, false, true},
    {"unexpose", SessionOp::kUnexpose, false, true},
    {"ports", SessionOp::kPorts, false, true},
};

JobError Err(ErrorCode c, std::string m) { return JobError{c, std::move(m)}; }

// The job fields an operation takes (the rest of a job map's are a job's only).
bool TakesJobField(SessionOp op, std::string_view k) {
  static constexpr std::string_view kCommand[] = {"argv", "shell", "code", "runtime", "env", "cwd",
                                                  "stdin", "timeout_ms", "max_output_bytes"};
  switch (op) {
    case SessionOp::kExec:
      return std::find(std::begin(kCommand), std::end(kCommand), k) != std::end(kCommand);
    case SessionOp::kSpawn:
      return k == "argv" || k == "shell" || k == "env" || k == "cwd";
    case SessionOp::kCode:
      return k == "code" || k == "runtime" || k == "timeout_ms" || k == "max_output_bytes";
    case SessionOp::kContextRestart:
      return k == "runtime";
    default:
      return false;
  }
}

bool ValidName(std::string_view s) {  // template, context and snapshot names
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-')) {
      return false;
    }
  }
  return true;
}

// A map string -> string of at most `max_items` entries and `max_bytes` bytes (env rules checked
// by the caller where they apply).
std::optional<JobError> StringMap(const msgpack::object& v, std::string_view name, size_t max_items, size_t max_bytes,
                                  std::vector<std::pair<std::string, std::string>>* out) {
  if (v.type != msgpack::type::MAP) return Err(ErrorCode::kBadField, std::string(name) + ": not a map");
  if (v.via.map.size > max_items) return Err(ErrorCode::kTooLarge, std::string(name) + ": too many entries");
  size_t total = 0;
  for (uint32_t i = 0; i < v.via.map.size; ++i) {
    const auto& kv = v.via.map.ptr[i];
    if (!IsStr(kv.key) || !IsStr(kv.val)) return Err(ErrorCode::kBadField, std::string(name) + ": not strings");
    if (const char* why = BadText(StrOf(kv.key))) return Err(ErrorCode::kBadField, std::string(name) + ": a key " + why);
    if (const char* why = BadText(StrOf(kv.val))) return Err(ErrorCode::kBadField, std::string(name) + ": a value " + why);
    total += kv.key.via.str.size + kv.val.via.str.size;
    out->emplace_back(std::string(StrOf(kv.key)), std::string(StrOf(kv.val)));
  }
  if (total > max_bytes) return Err(ErrorCode::kTooLarge, std::string(name) + ": too many bytes");
  return std::nullopt;
}

std::optional<JobError> CreateField(std::string_view k, const msgpack::object& v, const ServerLimits& lim,
                                    const SessionLimits& sl, uint32_t version, SessionCreateOptions& c) {
  if (k == "egress") {
    // The job map's rules (version 3 only, canonical rules).
    JobSpec probe;
    probe.version = version;
    bool known = false;
    if (auto e = DecodeJobField("egress", v, lim, probe, &known)) return e;
    c.egress = std::move(probe.egress);
  } else if (k == "template") {
    if (!IsStr(v) || !ValidName(StrOf(v))) return Err(ErrorCode::kBadField, "template: 1..64 characters of [A-Za-z0-9._-]");
    c.template_name = std::string(StrOf(v));
    c.template_given = true;
  } else if (k == "env") {
    // The job map's rules for env (names, sizes).
    JobSpec probe;
    bool known = false;
    if (auto e = DecodeJobField("env", v, lim, probe, &known)) return e;
    c.env = std::move(probe.env);
  } else if (k == "labels") {
    if (auto e = StringMap(v, "labels", 64, 4096, &c.labels)) return e;
  } else if (k == "limits") {
    if (v.type != msgpack::type::MAP) return Err(ErrorCode::kBadField, "limits: not a map");
    for (uint32_t i = 0; i < v.via.map.size; ++i) {
      const auto& kv = v.via.map.ptr[i];
      std::string_view name = IsStr(kv.key) ? StrOf(kv.key) : "";
      if (name == "cpus") {
        double cpus = kv.val.type == msgpack::type::FLOAT64 || kv.val.type == msgpack::type::FLOAT32
                          ? kv.val.via.f64
                          : IsUint(kv.val) ? static_cast<double>(kv.val.via.u64) : -1;
        if (!(cpus > 0) || cpus > 1024 || std::isnan(cpus)) return Err(ErrorCode::kBadField, "limits.cpus: a positive number");
        c.cpus = cpus;
        continue;
      }
      if (!IsUint(kv.val) || kv.val.via.u64 == 0) return Err(ErrorCode::kBadField, "limits." + std::string(name) + ": a positive uint");
      uint64_t n = kv.val.via.u64;
      if (name == "memory_bytes") c.memory_bytes = std::clamp<uint64_t>(n, std::min(lim.min_memory_bytes, lim.max_memory_bytes), lim.max_memory_bytes);
      else if (name == "pids") c.pids = std::clamp<uint64_t>(n, std::min(lim.min_pids, lim.max_pids), lim.max_pids);
      else if (name == "disk_bytes") c.disk_bytes = std::clamp<uint64_t>(n, sl.min_disk_bytes, sl.max_disk_bytes);
      else return Err(ErrorCode::kBadField, "limits: unknown field " + Quote(name));
    }
  } else if (k == "idle_timeout_ms" || k == "max_lifetime_ms" || k == "wait_ms") {
    if (!IsUint(v)) return Err(ErrorCode::kBadField, std::string(k) + ": not a uint");
    if (k == "idle_timeout_ms") c.idle_timeout_ms = v.via.u64;
    else if (k == "max_lifetime_ms") c.max_lifetime_ms = v.via.u64;
    else c.wait_ms = std::min<uint64_t>(v.via.u64, 600000);
  } else if (k == "ephemeral") {
    if (!GetBool(v, &c.ephemeral)) return Err(ErrorCode::kBadField, "ephemeral: not a bool");
  } else {
    return Err(ErrorCode::kBadField, "unknown field " + Quote(k));
  }
  return std::nullopt;
}

std::optional<JobError> OpField(std::string_view k, const msgpack::object& v, SessionRequest& r) {
  SessionOp op = r.op;
  auto uint = [&](uint64_t* out) -> std::optional<JobError> {
    if (!GetU64(v, out)) return Err(ErrorCode::kBadField, std::string(k) + ": not a uint");
    return std::nullopt;
  };
  if (k == "context" && (op == SessionOp::kCode || op == SessionOp::kContextRestart)) {
    if (!IsStr(v) || !ValidName(StrOf(v))) return Err(ErrorCode::kBadField, "context: 1..64 characters of [A-Za-z0-9._-]");
    r.context = std::string(StrOf(v));
  } else if (k == "stdin" && op == SessionOp::kSpawn) {
    std::string mode;
    if (!GetStr(v, &mode) || (mode != "pipe" && mode != "ignore")) return Err(ErrorCode::kBadField, "stdin: \"pipe\" or \"ignore\"");
    r.stdin_pipe = mode == "pipe";
  } else if (k == "pid" && (op == SessionOp::kOutput || op == SessionOp::kStdin || op == SessionOp::kKill)) {
    if (!GetStr(v, &r.pid) || r.pid.empty() || r.pid.size() > 32) return Err(ErrorCode::kBadField, "pid: a process id string");
  } else if (k == "tail_lines" && op == SessionOp::kOutput) {
    uint64_t n = 0;
    if (auto e = uint(&n)) return e;
    r.tail_lines = n;
  } else if (k == "wait" && op == SessionOp::kOutput) {
    if (!GetBool(v, &r.wait)) return Err(ErrorCode::kBadField, "wait: not a bool");
  } else if (k == "wait_timeout_ms" && op == SessionOp::kOutput) {
    if (auto e = uint(&r.wait_timeout_ms)) return e;
    r.wait_timeout_ms = std::min<uint64_t>(r.wait_timeout_ms, 600000);
  } else if (k == "data" && op == SessionOp::kStdin) {
    if (!GetBytes(v, &r.data)) return Err(ErrorCode::kBadField, "data: not bytes");
    if (r.data.size() > (16u << 20)) return Err(ErrorCode::kTooLarge, "data: more than 16 MiB");
  } else if (k == "close" && op == SessionOp::kStdin) {
    if (!GetBool(v, &r.close)) return Err(ErrorCode::kBadField, "close: not a bool");
  } else if (k == "signal" && op == SessionOp::kKill) {
    uint64_t n = 0;
    if (auto e = uint(&n)) return e;
    if (n < 1 || n > 64) return Err(ErrorCode::kBadField, "signal: 1..64");
    r.signal = static_cast<int>(n);
  } else if (k == "port" && (op == SessionOp::kExpose || op == SessionOp::kUnexpose)) {
    uint64_t n = 0;
    if (auto e = uint(&n)) return e;
    if (n < 1 || n > 65535) return Err(ErrorCode::kBadField, "port: 1..65535");
    r.port = static_cast<uint32_t>(n);
  } else if (k == "protocol" && op == SessionOp::kExpose) {
    std::string proto;
    if (!GetStr(v, &proto) || proto != "http") return Err(ErrorCode::kBadField, "protocol: \"http\" (the only one served)");
  } else if (k == "name" && (op == SessionOp::kSnapshot || op == SessionOp::kSnapshotDelete)) {
    if (!IsStr(v) || !ValidName(StrOf(v))) return Err(ErrorCode::kBadField, "name: 1..64 characters of [A-Za-z0-9._-]");
    r.name = std::string(StrOf(v));
  } else if (k == "as_root" && (op == SessionOp::kExec || op == SessionOp::kSpawn || SessionOpOf(op).file_op)) {
    if (!GetBool(v, &r.as_root)) return Err(ErrorCode::kBadField, "as_root: not a bool");
  } else {
    return Err(ErrorCode::kBadField, "unknown field " + Quote(k) + " for " + std::string(SessionOpOf(op).name));
  }
  return std::nullopt;
}

std::variant<SessionRequest, JobError> DecodeImpl(std::string_view payload, const ServerLimits& lim,
                                                  const SessionLimits& sl) {
  uint64_t max_str = std::max({lim.max_argv_bytes, lim.max_env_bytes, lim.max_stdin_bytes, uint64_t{16u << 20}}) + 1;
  msgpack::unpack_limit limit(std::max<size_t>(lim.max_argv_items, 10000) + 1,
                              std::max<size_t>(lim.max_env_items, 64) + 1, max_str, max_str, 0, kMaxDepth);
  Parsed p = ParseOne(payload, limit);
  if (p.fail == ParseFail::kTooLarge || p.fail == ParseFail::kNoMemory) return Err(ErrorCode::kTooLarge, p.detail);
  if (p.fail != ParseFail::kNone) return Err(ErrorCode::kBadPayload, p.detail);
  const msgpack::object& root = p.handle.get();
  if (root.type != msgpack::type::MAP) return Err(ErrorCode::kBadPayload, "not a map");
  const auto& m = root.via.map;
  SessionRequest r;  // raw is set by the caller, which owns the payload
  // v and op first: they decide how to read the rest.
  const msgpack::object *v = nullptr, *op = nullptr;
  for (uint32_t i = 0; i < m.size; ++i) {
    if (!IsStr(m.ptr[i].key)) return Err(ErrorCode::kBadField, "a field name is not a string");
    std::string_view k = StrOf(m.ptr[i].key);
    if (k == "v") v = &m.ptr[i].val;
    if (k == "op") op = &m.ptr[i].val;
  }
  if (v == nullptr || !IsUint(*v)) return Err(ErrorCode::kBadVersion, "v: missing or not a uint");
  if (v->via.u64 != 2 && v->via.u64 != 3) return Err(ErrorCode::kBadVersion, "v: a session request is version 2 (or 3)");
  r.version = static_cast<uint32_t>(v->via.u64);
  if (op == nullptr || !IsStr(*op)) return Err(ErrorCode::kBadField, "op: missing");
  const SessionOpInfo* info = FindSessionOp(StrOf(*op));
  if (info == nullptr) return Err(ErrorCode::kBadField, "op: unknown operation " + Quote(StrOf(*op)));
  r.op = info->op;
  bool has_id = false, has_session = false, has_timeout = false, has_max_output = false;
  int commands = 0;
  for (uint32_t i = 0; i < m.size; ++i) {
    std::string_view k = StrOf(m.ptr[i].key);
    const msgpack::object& val = m.ptr[i].val;
    if (k == "v" || k == "op") continue;
    if (k == "id") {
      if (!IsStr(val) || !ValidJobId(StrOf(val))) return Err(ErrorCode::kBadField, "id: must be 1..128 bytes of [A-Za-z0-9._:-]");
      r.id = std::string(StrOf(val));
      has_id = true;
    } else if (k == "session") {
      // Empty only for snapshot_delete, which needs no session.
      if (!IsStr(val) || (!ValidJobId(StrOf(val)) && !(r.op == SessionOp::kSnapshotDelete && StrOf(val).empty()))) {
        return Err(ErrorCode::kBadField, "session: must be 1..128 bytes of [A-Za-z0-9._:-]");
      }
      r.session = std::string(StrOf(val));
      has_session = true;
    } else if (info->file_op) {
      // Its own fields are checked by the agent that does it; as_root matters here too.
      if (k == "as_root" && !GetBool(val, &r.as_root)) return Err(ErrorCode::kBadField, "as_root: not a bool");
    } else if (r.op == SessionOp::kCreate) {
      if (auto e = CreateField(k, val, lim, sl, r.version, r.create)) return *e;
    } else if (TakesJobField(r.op, k)) {
      bool known = false;
      if (auto e = DecodeJobField(k, val, lim, r.command, &known)) return *e;
      commands += k == "argv" || k == "shell" || k == "code";
      has_timeout |= k == "timeout_ms";
      has_max_output |= k == "max_output_bytes";
    } else if (auto e = OpField(k, val, r)) {
      return *e;
    }
  }
  if (!has_id) return Err(ErrorCode::kBadField, "id: missing");
  if (!has_session && r.op != SessionOp::kSnapshotDelete) return Err(ErrorCode::kBadField, "session: missing");
  switch (r.op) {
    case SessionOp::kExec:
      if (commands != 1) return Err(ErrorCode::kBadField, "exactly one of argv, shell and code is required");
      if (r.command.code.has_value() != !r.command.runtime.empty()) return Err(ErrorCode::kBadField, "code and runtime go together");
      break;
    case SessionOp::kSpawn:
      if (commands != 1) return Err(ErrorCode::kBadField, "exactly one of argv and shell is required");
      break;
    case SessionOp::kCode:
      if (!r.command.code || (r.command.runtime != "python" && r.command.runtime != "node")) {
        return Err(ErrorCode::kBadField, "code and runtime (python or node) are required");
      }
      break;
    case SessionOp::kContextRestart:
      if (r.command.runtime != "python" && r.command.runtime != "node") return Err(ErrorCode::kBadField, "runtime: python or node");
      break;
    case SessionOp::kOutput:
    case SessionOp::kStdin:
    case SessionOp::kKill:
      if (r.pid.empty()) return Err(ErrorCode::kBadField, "pid: missing");
      break;
    case SessionOp::kSnapshot:
    case SessionOp::kSnapshotDelete:
      if (r.name.empty()) return Err(ErrorCode::kBadField, "name: missing");
      break;
    case SessionOp::kExpose:
    case SessionOp::kUnexpose:
      if (r.port == 0) return Err(ErrorCode::kBadField, "port: missing");
      break;
    default:
      break;
  }
  DefaultJobLimits(r.command, lim, has_timeout, has_max_output);
  r.command.id = r.id;
  return r;
}

void PackStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void PackOpResult(Packer& pk, StringSink& buf, const OpResult& r) {
  pk.pack_map(7);
  PackStr(pk, "v");
  pk.pack_uint64(2);
  PackStr(pk, "id");
  PackStr(pk, r.id);
  PackStr(pk, "op");
  PackStr(pk, r.op);
  PackStr(pk, "session");
  PackStr(pk, r.session);
  PackStr(pk, "ok");
  pk.pack(!r.error.has_value());
  PackStr(pk, "error");
  if (r.error) {
    pk.pack_map(3);
    PackStr(pk, "code");
    PackStr(pk, ErrorCodeName(r.error->code));
    PackStr(pk, "message");
    PackStr(pk, r.error->message);
    PackStr(pk, "retryable");
    pk.pack(ErrorCodeRetryable(r.error->code));
  } else {
    pk.pack_nil();
  }
  PackStr(pk, "value");
  if (r.value.empty()) {
    pk.pack_nil();
  } else {
    buf.write(r.value.data(), r.value.size());  // already a msgpack map
  }
}

}  // namespace

const SessionOpInfo* FindSessionOp(std::string_view name) {
  for (const SessionOpInfo& o : kSessionOps) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

const SessionOpInfo& SessionOpOf(SessionOp op) {
  for (const SessionOpInfo& o : kSessionOps) {
    if (o.op == op) return o;
  }
  return kSessionOps[0];
}

namespace {

// `raw` is `*take`'s buffer when given, else a copy of `payload` (which `*take` then holds).
std::variant<SessionRequest, JobError> DecodeCaught(std::string_view payload, const ServerLimits& limits,
                                                    const SessionLimits& session_limits, std::string* take) {
  try {
    auto out = DecodeImpl(payload, limits, session_limits);
    if (auto* r = std::get_if<SessionRequest>(&out)) r->raw = take != nullptr ? std::move(*take) : std::string(payload);
    return out;
  } catch (const std::bad_alloc&) {
    return Err(ErrorCode::kTooLarge, "out of memory decoding the request");
  } catch (...) {
    return Err(ErrorCode::kInternal, "unexpected exception decoding the request");
  }
}

}  // namespace

std::variant<SessionRequest, JobError> DecodeSessionRequest(std::string_view payload, const ServerLimits& limits,
                                                            const SessionLimits& session_limits) {
  return DecodeCaught(payload, limits, session_limits, nullptr);
}

std::variant<SessionRequest, JobError> TakeSessionRequest(std::string& payload, const ServerLimits& limits,
                                                          const SessionLimits& session_limits) {
  return DecodeCaught(payload, limits, session_limits, &payload);
}

std::string EncodeOpResult(const OpResult& r) {
  std::string out;
  StringSink buf{&out};
  Packer pk(buf);
  PackOpResult(pk, buf, r);
  return out;
}

EncodedOpAnswer EncodeOpAnswer(const OpResult& r) {
  EncodedOpAnswer out;
  out.result = EncodeOpResult(r);
  StringSink buf{&out.event};
  Packer pk(buf);
  pk.pack_map(4);
  PackStr(pk, "v");
  pk.pack_uint64(2);
  PackStr(pk, "type");
  PackStr(pk, "exited");
  PackStr(pk, "seq");
  pk.pack_uint64(0);
  if (out.result.size() > kMaxCarriedResultBytes) {
    PackStr(pk, "result_bytes");
    pk.pack_uint64(out.result.size());
  } else {
    PackStr(pk, "result");
    PackOpResult(pk, buf, r);
  }
  return out;
}

std::optional<OpResult> DecodeOpResult(std::string_view bytes) {
  try {
    Parsed p = ParseOne(bytes, TolerantLimit());
    if (p.fail != ParseFail::kNone || p.handle.get().type != msgpack::type::MAP) return std::nullopt;
    OpResult r;
    const auto& m = p.handle.get().via.map;
    for (uint32_t i = 0; i < m.size; ++i) {
      if (!IsStr(m.ptr[i].key)) continue;
      std::string_view k = StrOf(m.ptr[i].key);
      const msgpack::object& v = m.ptr[i].val;
      if (k == "id") GetStr(v, &r.id);
      else if (k == "op") GetStr(v, &r.op);
      else if (k == "session") GetStr(v, &r.session);
      else if (k == "error" && v.type == msgpack::type::MAP) {
        JobError e{ErrorCode::kInternal, ""};
        for (uint32_t j = 0; j < v.via.map.size; ++j) {
          const auto& kv = v.via.map.ptr[j];
          if (!IsStr(kv.key) || !IsStr(kv.val)) continue;
          if (StrOf(kv.key) == "code") e.code = ParseErrorCode(StrOf(kv.val)).value_or(ErrorCode::kInternal);
          if (StrOf(kv.key) == "message") e.message = std::string(StrOf(kv.val));
        }
        r.error = e;
      } else if (k == "value" && v.type == msgpack::type::MAP) {
        r.value.clear();
        StringSink vb{&r.value};
        msgpack::pack(vb, v);
      }
    }
    return r;
  } catch (...) {
    return std::nullopt;
  }
}

std::string EncodeProcessOutputEvent(uint64_t seq, std::string_view stream, std::string_view data) {
  std::string out;
  StringSink buf{&out};
  Packer pk(buf);
  pk.pack_map(4);
  PackStr(pk, "v");
  pk.pack_uint64(2);
  PackStr(pk, "type");
  PackStr(pk, stream);
  PackStr(pk, "seq");
  pk.pack_uint64(seq);
  PackStr(pk, "data");
  pk.pack_bin(static_cast<uint32_t>(data.size()));
  pk.pack_bin_body(data.data(), static_cast<uint32_t>(data.size()));
  return out;
}

std::string EncodeProcessExitedEvent(uint64_t seq, std::optional<int> exit_code, std::optional<int> signal) {
  std::string out;
  StringSink buf{&out};
  Packer pk(buf);
  pk.pack_map(5);
  PackStr(pk, "v");
  pk.pack_uint64(2);
  PackStr(pk, "type");
  PackStr(pk, "exited");
  PackStr(pk, "seq");
  pk.pack_uint64(seq);
  PackStr(pk, "exit_code");
  if (exit_code) pk.pack_int64(*exit_code);
  else pk.pack_nil();
  PackStr(pk, "signal");
  if (signal) pk.pack_int64(*signal);
  else pk.pack_nil();
  return out;
}

std::string EncodeSessionInfo(const SessionInfo& i) {
  std::string out;
  StringSink buf{&out};
  Packer pk(buf);
  pk.pack_map(16 + !i.error.empty() + i.network.has_value());
  auto str = [&](std::string_view k, std::string_view v) {
    PackStr(pk, k);
    PackStr(pk, v);
  };
  auto num = [&](std::string_view k, uint64_t v) {
    PackStr(pk, k);
    pk.pack_uint64(v);
  };
  str("session", i.session);
  str("state", i.state);
  str("template", i.template_name);
  str("host", i.host);
  PackStr(pk, "created_ms");
  pk.pack_int64(i.created_ms);
  PackStr(pk, "last_used_ms");
  pk.pack_int64(i.last_used_ms);
  PackStr(pk, "timeout_at_ms");
  pk.pack_int64(i.timeout_at_ms);
  PackStr(pk, "labels");
  pk.pack_map(static_cast<uint32_t>(i.labels.size()));
  for (const auto& [k, v] : i.labels) {
    PackStr(pk, k);
    PackStr(pk, v);
  }
  PackStr(pk, "ephemeral");
  pk.pack(i.ephemeral);
  num("memory_bytes", i.memory_bytes);
  num("memory_limit_bytes", i.memory_limit_bytes);
  num("cpu_time_us", i.cpu_time_us);
  PackStr(pk, "cpus");
  pk.pack_double(i.cpus);
  num("disk_bytes", i.disk_bytes);
  num("disk_limit_bytes", i.disk_limit_bytes);
  num("processes", i.processes);
  if (!i.error.empty()) str("error", i.error);
  if (i.network) {
    PackStr(pk, "network");
    PackNetworkInfo(pk, *i.network);
  }
  return out;
}

}  // namespace sandpool
