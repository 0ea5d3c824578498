#include "clients/cli/commands.h"

#include <unistd.h>

#include "clients/cli/help.h"
#include "clients/cli/output.h"
#include "clients/cli/watch.h"
#include "common/clock.h"
#include "queue/keys.h"
#include "queue/redis_sync.h"
#include "queue/redis_url.h"

namespace sandpool::cli {
namespace {

Result<std::string> ReadOwnStdin() { return ReadAllFd(STDIN_FILENO, 16u << 20); }

int Usage(std::string_view command, const Status& s) {
  PrintError(s.message());
  PrintError("see 'sandpool " + std::string(command) + " --help'");
  return kExitUsage;
}

int PrintHelp(std::string_view command) {
  (void)WriteFd(STDOUT_FILENO, HelpText(command));
  return 0;
}

// Options of result/cancel/status: a few flags, then at most one positional argument.
struct SimpleArgs {
  bool help = false;
  bool wait = false;
  bool json = false;
  std::optional<uint64_t> timeout_ms;
  std::vector<std::string> positional;
};

Result<SimpleArgs> ParseSimple(const std::vector<std::string>& args, GlobalOptions* g,
                               bool allow_wait) {
  SimpleArgs s;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto global = ConsumeGlobalOption(args, &i, g);
    if (!global.ok()) return global.status();
    if (global.value()) continue;
    if (a == "--help" || a == "-h") {
      s.help = true;
    } else if (allow_wait && a == "--wait") {
      s.wait = true;
    } else if (allow_wait && a == "--json") {
      s.json = true;
    } else if (allow_wait && (a == "--timeout" || a.starts_with("--timeout="))) {
      std::string v;
      if (a == "--timeout") {
        if (i + 1 >= args.size()) return Status::Error("--timeout needs a value");
        v = args[++i];
      } else {
        v = a.substr(10);
      }
      auto ms = ParseSeconds(v);
      if (!ms.ok()) return ms.status().Prefixed("--timeout");
      s.timeout_ms = ms.value();
    } else if (a == "--") {
      s.positional.insert(s.positional.end(), args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    } else if (a.starts_with("-")) {
      return Status::Error("unknown option '" + a + "'");
    } else {
      s.positional.push_back(a);
    }
  }
  if (s.positional.size() > 1) return Status::Error("too many arguments");
  return s;
}

}  // namespace

int FinishJob(const JobResult& r, bool json, uint64_t skip_stdout, uint64_t skip_stderr) {
  if (json) {
    (void)WriteFd(STDOUT_FILENO, ResultToJson(r) + "\n");
  } else {
    PrintResultOutput(r, skip_stdout, skip_stderr);
    PrintOutcomeLine(r);
  }
  return CliExitCode(r.outcome, r.exit_code, r.signal);
}

namespace {

Status Enqueue(SyncRedis& redis, const Keys& keys, const GlobalOptions& g, const JobOptions& o) {
  std::string payload = EncodeJobRequest(o.spec, o.send_max_output);
  auto r = redis.Command({"XADD", keys.Queue(g.queue), "*", "id", o.spec.id, "job", payload});
  if (!r.ok()) return r.status().Prefixed("XADD");
  return Status::Ok();
}

}  // namespace

void PrintError(std::string_view message) {
  std::string line = "sandpool: ";
  line += message;
  line += '\n';
  (void)WriteFd(STDERR_FILENO, line);
}

int RunCommand(const std::vector<std::string>& args, GlobalOptions g) {
  auto o = ParseJobOptions(args, &g, &ReadOwnStdin);
  if (!o.ok()) return Usage("run", o.status());
  if (o->help) return PrintHelp("run");
  auto url = ParseRedisUrl(g.redis_url);
  if (!url.ok()) return Usage("run", url.status());
  Keys keys(g.prefix);
  WatchOptions wo;
  wo.stream_output = !o->json;
  JobWatcher watcher(url.value(), keys, o->spec.id, wo);
  // Subscribe first: every event published after the XADD then reaches us.
  if (Status s = watcher.Subscribe(); !s.ok()) {
    PrintError(s.message());
    return kExitFailure;
  }
  if (Status s = Enqueue(watcher.cmd(), keys, g, o.value()); !s.ok()) {
    PrintError(s.message());
    return kExitFailure;
  }
  auto r = watcher.Wait();
  if (!r.ok()) {
    PrintError(r.status().message());
    PrintError("job " + o->spec.id + " was submitted; see 'sandpool result --wait " + o->spec.id + "'");
    return kExitFailure;
  }
  return FinishJob(r.value(), o->json, watcher.streamed_stdout(r.value()),
                watcher.streamed_stderr(r.value()));
}

int SubmitCommand(const std::vector<std::string>& args, GlobalOptions g) {
  auto o = ParseJobOptions(args, &g, &ReadOwnStdin);
  if (!o.ok()) return Usage("submit", o.status());
  if (o->help) return PrintHelp("submit");
  auto url = ParseRedisUrl(g.redis_url);
  if (!url.ok()) return Usage("submit", url.status());
  auto redis = SyncRedis::Connect(url.value());
  if (!redis.ok()) {
    PrintError(redis.status().message());
    return kExitFailure;
  }
  if (Status s = Enqueue(*redis.value(), Keys(g.prefix), g, o.value()); !s.ok()) {
    PrintError(s.message());
    return kExitFailure;
  }
  (void)WriteFd(STDOUT_FILENO, o->spec.id + "\n");
  return 0;
}

int ResultCommand(const std::vector<std::string>& args, GlobalOptions g) {
  auto a = ParseSimple(args, &g, /*allow_wait=*/true);
  if (!a.ok()) return Usage("result", a.status());
  if (a->help) return PrintHelp("result");
  if (a->positional.size() != 1) return Usage("result", Status::Error("which job? give its ID"));
  const std::string& id = a->positional[0];
  if (!ValidJobId(id)) return Usage("result", Status::Error("invalid job id '" + id + "'"));
  auto url = ParseRedisUrl(g.redis_url);
  if (!url.ok()) return Usage("result", url.status());
  WatchOptions wo;
  wo.stream_output = false;
  if (a->timeout_ms) wo.deadline_us = MonotonicUs() + static_cast<int64_t>(*a->timeout_ms) * 1000;
  JobWatcher watcher(url.value(), Keys(g.prefix), id, wo);
  if (!a->wait) {
    auto r = watcher.FetchResult();
    if (!r.ok()) {
      PrintError(r.status().message());
      return kExitFailure;
    }
    if (!r.value()) {
      PrintError(id + ": not finished");
      return kExitNotFinished;
    }
    return FinishJob(*r.value(), a->json, 0, 0);
  }
  if (Status s = watcher.Subscribe(); !s.ok()) {
    PrintError(s.message());
    return kExitFailure;
  }
  auto r = watcher.Wait();
  if (!r.ok()) {
    if (r.status().sys_errno() == ETIMEDOUT) {
      PrintError(id + ": not finished");
      return kExitNotFinished;
    }
    PrintError(r.status().message());
    return kExitFailure;
  }
  return FinishJob(r.value(), a->json, 0, 0);
}

int CancelCommand(const std::vector<std::string>& args, GlobalOptions g) {
  auto a = ParseSimple(args, &g, /*allow_wait=*/false);
  if (!a.ok()) return Usage("cancel", a.status());
  if (a->help) return PrintHelp("cancel");
  if (a->positional.size() != 1) return Usage("cancel", Status::Error("which job? give its ID"));
  const std::string& id = a->positional[0];
  if (!ValidJobId(id)) return Usage("cancel", Status::Error("invalid job id '" + id + "'"));
  auto url = ParseRedisUrl(g.redis_url);
  if (!url.ok()) return Usage("cancel", url.status());
  auto conn = SyncRedis::Connect(url.value());
  if (!conn.ok()) {
    PrintError(conn.status().message());
    return kExitFailure;
  }
  SyncRedis& redis = *conn.value();
  Keys keys(g.prefix);
  // PROTOCOL.md section 7: the flag and the notification go together or not at all.
  const std::vector<std::vector<std::string>> tx = {
      {"MULTI"},
      {"HSET", keys.Job(id), "cancel", "1"},
      {"EXPIRE", keys.Job(id), "86400"},
      {"PUBLISH", keys.Cancel(), id},
      {"EXEC"},
  };
  for (const auto& cmd : tx) {
    auto r = redis.Command(cmd);
    if (!r.ok()) {
      PrintError(cmd[0] + ": " + r.status().message());
      if (cmd[0] != "MULTI") (void)redis.Command({"DISCARD"});
      return kExitFailure;
    }
    if (cmd[0] == "EXEC" && r.value()->type != REDIS_REPLY_ARRAY) {
      PrintError("cancel transaction was aborted");
      return kExitFailure;
    }
  }
  auto done = redis.Command({"EXISTS", keys.Result(id)});
  if (done.ok() && done.value()->type == REDIS_REPLY_INTEGER && done.value()->integer == 1) {
    PrintError(id + ": already finished; the cancel has no effect");
  } else {
    PrintError(id + ": cancel requested");
  }
  return 0;
}

}  // namespace sandpool::cli
