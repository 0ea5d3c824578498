// Protocol decoders of what daemons write: results and events (the job map's is job_decode.cc,
// the encoders protocol.cc). Tolerant: unknown fields are skipped, known fields must have their
// type. Nothing here is trusted more than a job is: same parser bounds.
#include "queue/msgpack_read.h"
#include "queue/protocol.h"
#include "queue/result_fields.h"

namespace sandpool {
namespace {

using namespace mpk;

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

// Reads the value of the field named `key` (if VisitResultFields names it) into its member.
struct ResultReader {
  std::string_view key;
  const msgpack::object& v;
  bool matched = false;
  bool ok = true;
  std::string unknown_outcome;
  bool Is(const char* name) {
    if (matched || key != name) return false;
    matched = true;
    return true;
  }
  void Str(const char* n, std::string& s) { if (Is(n)) ok = GetStr(v, &s); }
  void Bytes(const char* n, std::string& s) { if (Is(n)) ok = GetBytes(v, &s); }
  void Bool(const char* n, bool& b) { if (Is(n)) ok = GetBool(v, &b); }
  void U64(const char* n, uint64_t& u) { if (Is(n)) ok = GetU64(v, &u); }
  void U32(const char* n, uint32_t& u) { if (Is(n)) ok = GetU32(v, &u); }
  void OptInt(const char* n, std::optional<int>& i) { if (Is(n)) ok = GetOptInt(v, &i); }
  void Error(const char* n, std::optional<JobError>& e) { if (Is(n)) ok = ReadErrorMap(v, &e); }
  void Network(const char* n, std::optional<NetworkInfo>& net) {
    if (!Is(n)) return;
    if (v.type == msgpack::type::NIL) return;
    // {egress: {allow: [str], deny: [str]}}; other keys (a newer daemon's) are ignored.
    ok = v.type == msgpack::type::MAP;
    if (!ok) return;
    NetworkInfo out;
    for (uint32_t i = 0; ok && i < v.via.map.size; ++i) {
      const auto& kv = v.via.map.ptr[i];
      if (!IsStr(kv.key) || StrOf(kv.key) != "egress") continue;
      ok = kv.val.type == msgpack::type::MAP;
      for (uint32_t j = 0; ok && j < kv.val.via.map.size; ++j) {
        const auto& list = kv.val.via.map.ptr[j];
        std::vector<std::string>* into = !IsStr(list.key) ? nullptr : StrOf(list.key) == "allow" ? &out.allow
                                         : StrOf(list.key) == "deny" ? &out.deny : nullptr;
        if (into == nullptr) continue;
        ok = list.val.type == msgpack::type::ARRAY;
        for (uint32_t k = 0; ok && k < list.val.via.array.size; ++k) {
          std::string rule;
          ok = GetStr(list.val.via.array.ptr[k], &rule);
          into->push_back(std::move(rule));
        }
      }
    }
    if (ok) net = std::move(out);
  }
  void Outcome(const char* n, sandpool::Outcome& o) {
    if (!Is(n)) return;
    std::string name;
    ok = GetStr(v, &name);
    if (!ok) return;
    if (auto parsed = ParseOutcome(name)) {
      o = *parsed;
    } else {
      o = sandpool::Outcome::kError;  // a newer daemon's outcome; report it as an error
      unknown_outcome = name;
    }
  }
};

bool ReadResultObject(const msgpack::object& root, JobResult* r) {
  if (root.type != msgpack::type::MAP) return false;
  bool have_v = false, have_id = false, have_outcome = false;
  std::string unknown_outcome;
  for (uint32_t i = 0; i < root.via.map.size; ++i) {
    const auto& kv = root.via.map.ptr[i];
    if (!IsStr(kv.key)) continue;
    std::string_view k = StrOf(kv.key);
    if (k == "v") {
      uint64_t ver = 0;
      if (!GetU64(kv.val, &ver) || ver < 1) return false;
      have_v = true;
      continue;
    }
    ResultReader reader{k, kv.val};
    VisitResultFields(*r, reader);
    if (!reader.ok) return false;
    have_id |= k == "id";
    have_outcome |= k == "outcome";
    if (!reader.unknown_outcome.empty()) unknown_outcome = reader.unknown_outcome;
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
