#include "clients/cli/session.h"

#include <unistd.h>

#include <msgpack.hpp>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>

#include "clients/cli/commands.h"
#include "clients/cli/help.h"
#include "clients/cli/output.h"
#include "clients/cli/watch.h"
#include "common/clock.h"
#include "queue/keys.h"
#include "queue/redis_sync.h"
#include "queue/redis_url.h"
#include "queue/session_protocol.h"

namespace sandpool::cli {
namespace {

// A request map under construction: each field's value is already msgpack.
class Request {
 public:
  Request(const std::string& op, const std::string& id, const std::string& session) {
    Str("op", op);
    Str("id", id);
    Str("session", session);
    Raw("v", Pack(uint64_t{2}));
  }
  template <typename T>
  static std::string Pack(const T& v) {
    msgpack::sbuffer b;
    msgpack::pack(b, v);
    return std::string(b.data(), b.size());
  }
  static std::string Bin(std::string_view s) {
    msgpack::sbuffer b;
    msgpack::packer<msgpack::sbuffer> pk(b);
    pk.pack_bin(static_cast<uint32_t>(s.size()));
    pk.pack_bin_body(s.data(), static_cast<uint32_t>(s.size()));
    return std::string(b.data(), b.size());
  }
  void Raw(const std::string& k, std::string packed) { fields_[k] = std::move(packed); }
  void Str(const std::string& k, const std::string& v) { Raw(k, Pack(v)); }
  std::string Encode() const {
    msgpack::sbuffer b;
    msgpack::packer<msgpack::sbuffer> pk(b);
    pk.pack_map(static_cast<uint32_t>(fields_.size()));
    for (const auto& [k, v] : fields_) {
      pk.pack(k);
      b.write(v.data(), v.size());
    }
    return std::string(b.data(), b.size());
  }

 private:
  std::map<std::string, std::string> fields_;
};

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> options;  // --name -> values
  bool Has(const std::string& k) const { return options.count(k) > 0; }
  std::string Get(const std::string& k, std::string dflt = "") const {
    auto it = options.find(k);
    return it == options.end() || it->second.empty() ? dflt : it->second.back();
  }
};

// Flags (no value) and options (one value, repeatable) of one subcommand; global options may
// appear anywhere.
Result<Args> Parse(const std::vector<std::string>& args, GlobalOptions* g, const std::vector<std::string>& flags,
                   const std::vector<std::string>& options) {
  Args a;
  for (size_t i = 0; i < args.size(); ++i) {
    auto global = ConsumeGlobalOption(args, &i, g);
    if (!global.ok()) return global.status();
    if (global.value()) continue;
    const std::string& s = args[i];
    if (s == "--help" || s == "-h") {
      a.options["--help"];
      continue;
    }
    if (!s.starts_with("--")) {
      a.positional.push_back(s);
      continue;
    }
    std::string name = s.substr(0, s.find('='));
    if (std::find(flags.begin(), flags.end(), name) != flags.end() && name == s) {
      a.options[name];
      continue;
    }
    if (std::find(options.begin(), options.end(), name) == options.end()) return Status::Error("unknown option '" + s + "'");
    if (name != s) {
      a.options[name].push_back(s.substr(name.size() + 1));
    } else {
      if (i + 1 >= args.size()) return Status::Error(name + " needs a value");
      a.options[name].push_back(args[++i]);
    }
  }
  return a;
}

int Usage(const Status& s) {
  PrintError(s.message());
  PrintError("see 'sandpool session --help'");
  return kExitUsage;
}

int Failed(const Status& s) {
  PrintError(s.message());
  return kExitFailure;
}

// The stream an operation on `sid` goes to (PROTOCOL.md section 13, step 2).
Result<std::string> StreamFor(SyncRedis& redis, const Keys& keys, const GlobalOptions& g, const std::string& op,
                              const std::string& sid) {
  auto holder = redis.Command({"HGET", keys.Session(sid), "consumer"});
  if (!holder.ok()) return holder.status();
  if (holder.value()->type != REDIS_REPLY_STRING) {
    if (op != "create") return Status::Error("session_not_found: no session " + sid);
    return keys.SessionIntake(g.queue);
  }
  return keys.SessionStream(g.queue, std::string(holder.value()->str, holder.value()->len));
}

// Sends one operation and waits for its result (its exited event, or its result key).
Result<OpResult> Call(const GlobalOptions& g, const std::string& op, const std::string& sid,
                      const std::function<void(Request&)>& fill, int64_t timeout_ms = 120000) {
  auto url = ParseRedisUrl(g.redis_url);
  if (!url.ok()) return url.status();
  Keys keys(g.prefix);
  auto cmd = SyncRedis::Connect(url.value());
  if (!cmd.ok()) return cmd.status();
  auto sub = SyncRedis::Connect(url.value());
  if (!sub.ok()) return sub.status();
  auto stream = StreamFor(*cmd.value(), keys, g, op, sid);
  if (!stream.ok()) return stream.status();
  auto id = NewJobId();
  if (!id.ok()) return id.status();
  if (Status s = sub.value()->Append({"SUBSCRIBE", keys.Out(id.value())}); !s.ok()) return s;
  if (auto confirm = sub.value()->ReadReply(10000); !confirm.ok()) return confirm.status();
  Request req(op, id.value(), sid);
  if (fill) fill(req);
  auto added = cmd.value()->Command({"XADD", stream.value(), "*", "id", id.value(), "req", req.Encode()});
  if (!added.ok()) return added.status().Prefixed("XADD");
  int64_t deadline = MonotonicUs() + timeout_ms * 1000;
  for (;;) {
    auto stored = cmd.value()->Command({"GET", keys.Result(id.value())});
    if (!stored.ok()) return stored.status();
    if (stored.value()->type == REDIS_REPLY_STRING) {
      auto r = DecodeOpResult(std::string_view(stored.value()->str, stored.value()->len));
      if (!r) return Status::Error("undecodable result of " + op);
      return *r;
    }
    if (MonotonicUs() > deadline) return Status::Error(op + ": no answer within the timeout", ETIMEDOUT);
    (void)sub.value()->ReadReply(200);  // an event (or 200 ms): look at the result key again
  }
}

// Prints an operation's outcome: its value as JSON, or its error. Returns the exit status.
int Show(const Result<OpResult>& r, bool print_value = true) {
  if (!r.ok()) return Failed(r.status());
  if (r->error) {
    PrintError(std::string(ErrorCodeName(r->error->code)) + ": " + r->error->message);
    return kExitOpFailed;
  }
  if (print_value && !r->value.empty()) {
    auto json = MsgpackToJson(r->value);
    (void)WriteFd(STDOUT_FILENO, (json.ok() ? json.value() : std::string("{}")) + "\n");
  }
  return 0;
}

Result<std::string> OneId(const Args& a, size_t n = 1) {
  if (a.positional.size() != n) return Status::Error(n == 1 ? "give the session id" : "wrong number of arguments");
  if (!ValidJobId(a.positional[0])) return Status::Error("invalid session id '" + a.positional[0] + "'");
  return a.positional[0];
}

std::string PairMap(const std::vector<std::string>& kvs) {
  std::map<std::string, std::string> m;
  for (const std::string& kv : kvs) {
    size_t eq = kv.find('=');
    m[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
  }
  return Request::Pack(m);
}

int Create(const std::vector<std::string>& args, GlobalOptions g) {
  auto a = Parse(args, &g, {"--ephemeral"},
                 {"--template", "--memory", "--disk", "--pids", "--cpus", "--idle-timeout", "--lifetime", "--label", "--env", "--wait"});
  if (!a.ok()) return Usage(a.status());
  auto sid = OneId(a.value());
  if (!sid.ok()) return Usage(sid.status());
  std::map<std::string, std::string> limits;  // name -> packed
  for (const auto& [opt, field] : std::vector<std::pair<std::string, std::string>>{{"--memory", "memory_bytes"}, {"--disk", "disk_bytes"}}) {
    if (!a->Has(opt)) continue;
    auto v = ParseByteSize(a->Get(opt));
    if (!v.ok()) return Usage(v.status().Prefixed(opt));
    limits[field] = Request::Pack(v.value());
  }
  if (a->Has("--pids")) limits["pids"] = Request::Pack(static_cast<uint64_t>(std::strtoull(a->Get("--pids").c_str(), nullptr, 10)));
  if (a->Has("--cpus")) limits["cpus"] = Request::Pack(std::strtod(a->Get("--cpus").c_str(), nullptr));
  std::vector<std::pair<std::string, uint64_t>> times;
  for (const auto& [opt, field] : std::vector<std::pair<std::string, std::string>>{{"--idle-timeout", "idle_timeout_ms"}, {"--lifetime", "max_lifetime_ms"}, {"--wait", "wait_ms"}}) {
    if (!a->Has(opt)) continue;
    if (a->Get(opt) == "0") {
      times.emplace_back(field, 0);
      continue;
    }
    auto ms = ParseSeconds(a->Get(opt));
    if (!ms.ok()) return Usage(ms.status().Prefixed(opt));
    times.emplace_back(field, ms.value());
  }
  auto r = Call(g, "create", sid.value(), [&](Request& q) {
    if (a->Has("--template")) q.Str("template", a->Get("--template"));
    if (a->Has("--ephemeral")) q.Raw("ephemeral", Request::Pack(true));
    if (a->Has("--label")) q.Raw("labels", PairMap(a->options.at("--label")));
    if (a->Has("--env")) q.Raw("env", PairMap(a->options.at("--env")));
    for (const auto& [k, v] : times) q.Raw(k, Request::Pack(v));
    if (!limits.empty()) {
      msgpack::sbuffer b;
      msgpack::packer<msgpack::sbuffer> pk(b);
      pk.pack_map(static_cast<uint32_t>(limits.size()));
      for (const auto& [k, v] : limits) {
        pk.pack(k);
        b.write(v.data(), v.size());
      }
      q.Raw("limits", std::string(b.data(), b.size()));
    }
  });
  return Show(r);
}

int Simple(const std::string& op, const std::vector<std::string>& args, GlobalOptions g) {
  auto a = Parse(args, &g, {}, {});
  if (!a.ok()) return Usage(a.status());
  auto sid = OneId(a.value());
  if (!sid.ok()) return Usage(sid.status());
  return Show(Call(g, op, sid.value(), nullptr));
}

int List(const std::vector<std::string>& args, GlobalOptions g) {
  auto a = Parse(args, &g, {}, {});
  if (!a.ok()) return Usage(a.status());
  auto url = ParseRedisUrl(g.redis_url);
  if (!url.ok()) return Usage(url.status());
  auto redis = SyncRedis::Connect(url.value());
  if (!redis.ok()) return Failed(redis.status());
  Keys keys(g.prefix);
  auto ids = redis.value()->Command({"SMEMBERS", keys.Sessions()});
  if (!ids.ok()) return Failed(ids.status());
  std::vector<std::string> sids;
  for (size_t i = 0; i < ids.value()->elements; ++i) sids.emplace_back(ids.value()->element[i]->str, ids.value()->element[i]->len);
  std::sort(sids.begin(), sids.end());
  std::string out = "SESSION\tSTATE\tTEMPLATE\tHOST\n";
  for (const std::string& sid : sids) {
    auto rec = redis.value()->Command({"HMGET", keys.Session(sid), "state", "template", "consumer"});
    if (!rec.ok() || rec.value()->elements != 3) continue;
    out += sid;
    for (size_t i = 0; i < 3; ++i) {
      redisReply* f = rec.value()->element[i];
      out += '\t';
      out += f->type == REDIS_REPLY_STRING ? std::string(f->str, f->len) : "-";
    }
    out += '\n';
  }
  (void)WriteFd(STDOUT_FILENO, out);
  return 0;
}

int Exec(const std::vector<std::string>& args, GlobalOptions g) {
  if (args.empty() || args[0].starts_with("-")) return Usage(Status::Error("usage: sandpool session exec ID [options] -- CMD..."));
  const std::string sid = args[0];
  if (!ValidJobId(sid)) return Usage(Status::Error("invalid session id '" + sid + "'"));
  std::vector<std::string> rest;
  bool as_root = false;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--") {
      rest.insert(rest.end(), args.begin() + static_cast<long>(i), args.end());
      break;
    }
    if (args[i] == "--as-root") as_root = true;
    else rest.push_back(args[i]);
  }
  auto o = ParseJobOptions(rest, &g, +[]() -> Result<std::string> { return ReadAllFd(STDIN_FILENO, 16u << 20); });
  if (!o.ok()) return Usage(o.status());
  if (!o->spec.template_name.empty() || o->spec.retries != 0 || o->spec.memory_bytes != 0) {
    return Usage(Status::Error("--template, --retries and --memory are the session's, not a command's"));
  }
  auto url = ParseRedisUrl(g.redis_url);
  if (!url.ok()) return Usage(url.status());
  Keys keys(g.prefix);
  WatchOptions wo;
  wo.stream_output = !o->json;
  JobWatcher watcher(url.value(), keys, o->spec.id, wo);
  if (Status s = watcher.Subscribe(); !s.ok()) return Failed(s);
  auto stream = StreamFor(watcher.cmd(), keys, g, "exec", sid);
  if (!stream.ok()) return Failed(stream.status());
  // The command's fields are a job map's (PROTOCOL.md section 15): encode one and take them.
  Request req("exec", o->spec.id, sid);
  std::string job = EncodeJobRequest(o->spec, o->send_max_output);
  msgpack::object_handle oh = msgpack::unpack(job.data(), job.size());
  const auto& m = oh.get().via.map;
  for (uint32_t i = 0; i < m.size; ++i) {
    std::string k = m.ptr[i].key.as<std::string>();
    if (k == "v" || k == "id") continue;
    msgpack::sbuffer b;
    msgpack::pack(b, m.ptr[i].val);
    req.Raw(k, std::string(b.data(), b.size()));
  }
  if (as_root) req.Raw("as_root", Request::Pack(true));
  auto added = watcher.cmd().Command({"XADD", stream.value(), "*", "id", o->spec.id, "req", req.Encode()});
  if (!added.ok()) return Failed(added.status());
  auto r = watcher.Wait();
  if (!r.ok()) return Failed(r.status());
  return FinishJob(r.value(), o->json, watcher.streamed_stdout(r.value()), watcher.streamed_stderr(r.value()));
}

int Write(const std::vector<std::string>& args, GlobalOptions g) {
  auto a = Parse(args, &g, {"--as-root"}, {"--mode"});
  if (!a.ok()) return Usage(a.status());
  auto sid = OneId(a.value(), 2);
  if (!sid.ok()) return Usage(sid.status());
  auto data = ReadAllFd(STDIN_FILENO, 16u << 20);
  if (!data.ok()) return Failed(data.status());
  std::string path = a->positional[1];
  return Show(Call(g, "write", sid.value(), [&](Request& q) {
    msgpack::sbuffer b;
    msgpack::packer<msgpack::sbuffer> pk(b);
    pk.pack_array(1);
    pk.pack_map(a->Has("--mode") ? 3 : 2);
    pk.pack(std::string("path"));
    pk.pack(path);
    pk.pack(std::string("data"));
    pk.pack_bin(static_cast<uint32_t>(data->size()));
    pk.pack_bin_body(data->data(), static_cast<uint32_t>(data->size()));
    if (a->Has("--mode")) {
      pk.pack(std::string("mode"));
      pk.pack(static_cast<uint64_t>(std::strtoull(a->Get("--mode").c_str(), nullptr, 8)));
    }
    q.Raw("files", std::string(b.data(), b.size()));
    if (a->Has("--as-root")) q.Raw("as_root", Request::Pack(true));
  }), false);
}

int Read(const std::vector<std::string>& args, GlobalOptions g) {
  auto a = Parse(args, &g, {"--as-root"}, {});
  if (!a.ok()) return Usage(a.status());
  auto sid = OneId(a.value(), 2);
  if (!sid.ok()) return Usage(sid.status());
  std::string path = a->positional[1];
  auto r = Call(g, "read", sid.value(), [&](Request& q) {
    q.Str("path", path);
    if (a->Has("--as-root")) q.Raw("as_root", Request::Pack(true));
  });
  if (!r.ok() || r->error) return Show(r);
  msgpack::object_handle oh = msgpack::unpack(r->value.data(), r->value.size());
  const auto& m = oh.get().via.map;
  for (uint32_t i = 0; i < m.size; ++i) {
    if (m.ptr[i].key.as<std::string>() == "data" && m.ptr[i].val.type == msgpack::type::BIN) {
      (void)WriteFd(STDOUT_FILENO, std::string_view(m.ptr[i].val.via.bin.ptr, m.ptr[i].val.via.bin.size));
    }
  }
  return 0;
}

int Spawn(const std::vector<std::string>& args, GlobalOptions g) {
  if (args.empty() || args[0].starts_with("-")) return Usage(Status::Error("usage: sandpool session spawn ID [options] -- CMD..."));
  const std::string sid = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  auto o = ParseJobOptions(rest, &g, +[]() -> Result<std::string> { return Status::Error("--stdin: not for spawn"); });
  if (!o.ok()) return Usage(o.status());
  if (o->spec.code) return Usage(Status::Error("spawn runs argv or --shell"));
  return Show(Call(g, "spawn", sid, [&](Request& q) {
    if (o->spec.shell) q.Str("shell", *o->spec.shell);
    else q.Raw("argv", Request::Pack(o->spec.argv));
    if (!o->spec.env.empty()) {
      std::map<std::string, std::string> env(o->spec.env.begin(), o->spec.env.end());
      q.Raw("env", Request::Pack(env));
    }
    if (o->spec.cwd != "/work") q.Str("cwd", o->spec.cwd);
  }));
}

int Logs(const std::vector<std::string>& args, GlobalOptions g) {
  auto a = Parse(args, &g, {"--wait"}, {"--tail"});
  if (!a.ok()) return Usage(a.status());
  auto sid = OneId(a.value(), 2);
  if (!sid.ok()) return Usage(sid.status());
  auto r = Call(g, "output", sid.value(), [&](Request& q) {
    q.Str("pid", a->positional[1]);
    if (a->Has("--wait")) {
      q.Raw("wait", Request::Pack(true));
      q.Raw("wait_timeout_ms", Request::Pack(uint64_t{600000}));
    }
    if (a->Has("--tail")) q.Raw("tail_lines", Request::Pack(static_cast<uint64_t>(std::strtoull(a->Get("--tail").c_str(), nullptr, 10))));
  }, 700000);
  if (!r.ok() || r->error) return Show(r);
  msgpack::object_handle oh = msgpack::unpack(r->value.data(), r->value.size());
  const auto& m = oh.get().via.map;
  for (uint32_t i = 0; i < m.size; ++i) {
    std::string k = m.ptr[i].key.as<std::string>();
    if ((k == "stdout" || k == "stderr") && m.ptr[i].val.type == msgpack::type::BIN) {
      (void)WriteFd(k == "stdout" ? STDOUT_FILENO : STDERR_FILENO,
                    std::string_view(m.ptr[i].val.via.bin.ptr, m.ptr[i].val.via.bin.size));
    }
  }
  return 0;
}

int Snapshot(const std::vector<std::string>& args, GlobalOptions g) {
  auto a = Parse(args, &g, {}, {});
  if (!a.ok()) return Usage(a.status());
  auto sid = OneId(a.value(), 2);
  if (!sid.ok()) return Usage(sid.status());
  return Show(Call(g, "snapshot", sid.value(), [&](Request& q) { q.Str("name", a->positional[1]); }, 600000));
}

int Kill(const std::vector<std::string>& args, GlobalOptions g) {
  auto a = Parse(args, &g, {}, {"--signal"});
  if (!a.ok()) return Usage(a.status());
  auto sid = OneId(a.value(), 2);
  if (!sid.ok()) return Usage(sid.status());
  return Show(Call(g, "kill", sid.value(), [&](Request& q) {
    q.Str("pid", a->positional[1]);
    if (a->Has("--signal")) q.Raw("signal", Request::Pack(static_cast<uint64_t>(std::strtoull(a->Get("--signal").c_str(), nullptr, 10))));
  }));
}

// expose ID PORT / unexpose ID PORT: a port's preview URL, and its end.
int Port(const std::string& op, const std::vector<std::string>& args, GlobalOptions g) {
  auto a = Parse(args, &g, {}, {});
  if (!a.ok()) return Usage(a.status());
  auto sid = OneId(a.value(), 2);
  if (!sid.ok()) return Usage(sid.status());
  char* end = nullptr;
  uint64_t port = std::strtoull(a->positional[1].c_str(), &end, 10);
  if (*end != '\0' || port < 1 || port > 65535) return Usage(Status::Error("PORT must be 1..65535"));
  return Show(Call(g, op, sid.value(), [&](Request& q) { q.Raw("port", Request::Pack(port)); }));
}

}  // namespace

int SessionCommand(const std::vector<std::string>& args, GlobalOptions g) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    (void)WriteFd(args.empty() ? STDERR_FILENO : STDOUT_FILENO, HelpText("session"));
    return args.empty() ? kExitUsage : 0;
  }
  const std::string& sub = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (std::find(rest.begin(), rest.end(), "--help") != rest.end()) {
    (void)WriteFd(STDOUT_FILENO, HelpText("session"));
    return 0;
  }
  if (sub == "create") return Create(rest, g);
  if (sub == "info" || sub == "stop" || sub == "destroy" || sub == "ps" || sub == "ports") return Simple(sub, rest, g);
  if (sub == "expose" || sub == "unexpose") return Port(sub, rest, g);
  if (sub == "ls" || sub == "list") return List(rest, g);
  if (sub == "exec") return Exec(rest, g);
  if (sub == "write" || sub == "put") return Write(rest, g);
  if (sub == "read" || sub == "get") return Read(rest, g);
  if (sub == "snapshot") return Snapshot(rest, g);
  if (sub == "spawn") return Spawn(rest, g);
  if (sub == "logs") return Logs(rest, g);
  if (sub == "kill") return Kill(rest, g);
  PrintError("unknown session command '" + sub + "'; see 'sandpool session --help'");
  return kExitUsage;
}

}  // namespace sandpool::cli
