#include "clients/cli/output.h"

#include <unistd.h>

#include <msgpack.hpp>

#include "common/fd.h"
#include "common/log.h"
#include "queue/result_fields.h"

namespace sandpool::cli {
namespace {

void AppendBool(std::string& out, bool b) { out += b ? "true" : "false"; }

void AppendOptInt(std::string& out, const std::optional<int>& v) {
  out += v ? std::to_string(*v) : "null";
}

void RenderObject(const msgpack::object& o, std::string& out) {
  switch (o.type) {
    case msgpack::type::NIL: out += "null"; return;
    case msgpack::type::BOOLEAN: AppendBool(out, o.via.boolean); return;
    case msgpack::type::POSITIVE_INTEGER: out += std::to_string(o.via.u64); return;
    case msgpack::type::NEGATIVE_INTEGER: out += std::to_string(o.via.i64); return;
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: out += std::to_string(o.via.f64); return;
    case msgpack::type::STR: AppendJsonString(out, std::string_view(o.via.str.ptr, o.via.str.size)); return;
    case msgpack::type::BIN: AppendJsonString(out, std::string_view(o.via.bin.ptr, o.via.bin.size)); return;
    case msgpack::type::EXT: out += "\"<ext>\""; return;
    case msgpack::type::ARRAY:
      out += '[';
      for (uint32_t i = 0; i < o.via.array.size; ++i) {
        if (i) out += ',';
        RenderObject(o.via.array.ptr[i], out);
      }
      out += ']';
      return;
    case msgpack::type::MAP:
      out += '{';
      for (uint32_t i = 0; i < o.via.map.size; ++i) {
        if (i) out += ',';
        const auto& kv = o.via.map.ptr[i];
        if (kv.key.type == msgpack::type::STR) {
          RenderObject(kv.key, out);
        } else {
          std::string k;
          RenderObject(kv.key, k);
          AppendJsonString(out, k);
        }
        out += ':';
        RenderObject(kv.val, out);
      }
      out += '}';
      return;
  }
  out += "null";
}

}  // namespace

Status WriteFd(int fd, std::string_view data) {
  if (data.empty()) return Status::Ok();
  return WriteAll(fd, data.data(), data.size());
}

void PrintResultOutput(const JobResult& r, uint64_t skip_stdout, uint64_t skip_stderr) {
  if (r.stdout_data.size() > skip_stdout) {
    (void)WriteFd(STDOUT_FILENO, std::string_view(r.stdout_data).substr(skip_stdout));
  }
  if (r.stderr_data.size() > skip_stderr) {
    (void)WriteFd(STDERR_FILENO, std::string_view(r.stderr_data).substr(skip_stderr));
  }
}

void PrintOutcomeLine(const JobResult& r) {
  std::string line;
  if (r.error) {
    line = "sandpool: " + std::string(ErrorCodeName(r.error->code)) + ": " + r.error->message;
  } else {
    switch (r.outcome) {
      case Outcome::kExit:
      case Outcome::kSignal:
        return;  // the job's own status says it all
      case Outcome::kTimeout: line = "sandpool: timeout: the job ran past its time limit"; break;
      case Outcome::kOutputLimit: line = "sandpool: output_limit: the job wrote more than its output limit"; break;
      case Outcome::kMemoryLimit: line = "sandpool: memory_limit: the job ran out of memory"; break;
      case Outcome::kPidsLimit: line = "sandpool: pids_limit: the job hit its process limit"; break;
      case Outcome::kCpuLimit: line = "sandpool: cpu_limit: the job used up its CPU time"; break;
      case Outcome::kDiskLimit: line = "sandpool: disk_limit: the job's workspace or /tmp was full"; break;
      case Outcome::kSeccomp: line = "sandpool: seccomp: the job made a forbidden system call"; break;
      default: line = "sandpool: " + std::string(OutcomeName(r.outcome)); break;
    }
  }
  if (r.stdout_truncated || r.stderr_truncated) {
    (void)WriteFd(STDERR_FILENO, "sandpool: output truncated\n");
  }
  line += '\n';
  (void)WriteFd(STDERR_FILENO, line);
}

namespace {

// Appends each field of VisitResultFields as JSON (bytes as UTF-8 text, invalid bytes escaped).
struct ResultJson {
  std::string& o;
  bool first = true;
  void Key(const char* name) {
    if (!first) o += ',';
    first = false;
    AppendJsonString(o, name);
    o += ':';
  }
  void Str(const char* n, const std::string& s) { Key(n), AppendJsonString(o, s); }
  void Bytes(const char* n, const std::string& s) { Key(n), AppendJsonString(o, s); }
  void Bool(const char* n, bool b) { Key(n), AppendBool(o, b); }
  void U64(const char* n, uint64_t u) { Key(n), o += std::to_string(u); }
  void U32(const char* n, uint32_t u) { Key(n), o += std::to_string(u); }
  void OptInt(const char* n, const std::optional<int>& i) { Key(n), AppendOptInt(o, i); }
  void Outcome(const char* n, sandpool::Outcome v) { Key(n), AppendJsonString(o, OutcomeName(v)); }
  void Error(const char* n, const std::optional<JobError>& e) {
    Key(n);
    if (!e) {
      o += "null";
      return;
    }
    o += "{\"code\":";
    AppendJsonString(o, ErrorCodeName(e->code));
    o += ",\"message\":";
    AppendJsonString(o, e->message);
    o += ",\"retryable\":";
    AppendBool(o, ErrorCodeRetryable(e->code));
    o += '}';
  }
  void Network(const char* n, const std::optional<NetworkInfo>& net) {
    if (!net) return;
    Key(n);
    o += "{\"egress\":{";
    const char* sep = "";
    for (const auto& [name, list] : {std::pair<const char*, const std::vector<std::string>*>{"allow", &net->allow},
                                     {"deny", &net->deny}}) {
      o += sep;
      sep = ",";
      AppendJsonString(o, name);
      o += ":[";
      for (size_t i = 0; i < list->size(); ++i) {
        if (i) o += ',';
        AppendJsonString(o, (*list)[i]);
      }
      o += ']';
    }
    o += "}}";
  }
};

}  // namespace

std::string ResultToJson(const JobResult& r) {
  std::string o = "{";
  VisitResultFields(r, ResultJson{o});
  o += '}';
  return o;
}

Result<std::string> MsgpackToJson(std::string_view bytes) {
  try {
    // Bounded like every other decoder: the value comes from Redis, which anyone may write.
    msgpack::unpack_limit limit(1 << 16, 1 << 16, 16 << 20, 16 << 20, 1 << 16, 32);
    size_t off = 0;
    msgpack::object_handle oh = msgpack::unpack(bytes.data(), bytes.size(), off, nullptr,
                                                nullptr, limit);
    if (off != bytes.size()) return Status::Error("trailing bytes after the msgpack value");
    std::string out;
    RenderObject(oh.get(), out);
    return out;
  } catch (const std::exception& e) {
    return Status::Error(std::string("not msgpack: ") + e.what());
  }
}

}  // namespace sandpool::cli
