#include "clients/cli/map.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>

#include "clients/cli/commands.h"
#include "clients/cli/json_in.h"
#include "clients/cli/output.h"
#include "common/clock.h"
#include "queue/keys.h"
#include "queue/redis_sync.h"
#include "queue/redis_url.h"

namespace sandpool::cli {
namespace {

constexpr std::string_view kMapHelp = R"(sandpool map [options] [JOBS.jsonl | -] > results.jsonl

Runs one job per input line and writes one JSON result line per job to stdout as each finishes
(the result map of PROTOCOL.md section 5, plus "line": its input line number).

Input: each line is a job map as JSON ({"shell": "echo hi"}, {"argv": [...], "env": {...}},
{"code": "...", "runtime": "python"}, any field of PROTOCOL.md section 3; "id" optional), or,
with --shell, any text substituted into a command line. Blank lines are skipped. A line that
is not a valid job becomes an error record ("outcome": "error", "error": {"code", "message"})
with its line number, and the run goes on.

Options:
  --concurrency N       at most N jobs submitted and not finished (default 64)
  --template NAME       template of jobs that name none
  --timeout SECONDS     wall time limit of jobs that set none
  --shell 'CMD {}'      each input line, quoted as one sh word, replaces {} (appended when CMD
                        has no {}), as xargs -I does
  --resume              skip the lines whose ids already have a result line in the output
                        (stdout must be the file of the interrupted run, opened with >>)
  --fail-on-nonzero     exit 1 also when a job exits non-zero (or ends by a signal, limit...)

On a terminal, stderr shows progress (done/total, jobs/s, ETA, failures by outcome); a summary
table ends every run. Exit status: 0 when every job ran, whatever its own exit code; 1 when some
could not (a bad line, a rejected job, cancelled, worker lost) or, with --fail-on-nonzero, did
not succeed; 130 when interrupted (the jobs in flight are cancelled); 2 for bad arguments;
125 when Redis could not be used.
)";

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

// `digits` random hex digits (at most 32).
std::string RandomHex(size_t digits) {
  auto id = NewJobId();
  return id.ok() ? id.value().substr(0, digits) : std::to_string(getpid()) + "-" + std::to_string(MonotonicUs());
}

bool Blank(std::string_view s) { return s.find_first_not_of(" \t\r\n") == std::string_view::npos; }

// The record of a line that could not be a job, in the shape of a result line.
std::string ErrorLine(const std::string& id, size_t line_no, const JobError& e) {
  JobResult r;
  r.id = id;
  r.outcome = Outcome::kError;
  r.attempt = 0;
  r.error = JobError{e.code, "line " + std::to_string(line_no) + ": " + e.message};
  std::string json = ResultToJson(r);
  return "{\"line\":" + std::to_string(line_no) + "," + json.substr(1) + "\n";
}

std::string ResultLine(const JobResult& r, size_t line_no) {
  return "{\"line\":" + std::to_string(line_no) + "," + ResultToJson(r).substr(1) + "\n";
}

// An outcome that means the job did not run (PROTOCOL.md section 5).
bool CouldNotRun(const JobResult& r) {
  return r.outcome == Outcome::kError || r.outcome == Outcome::kWorkerLost || r.outcome == Outcome::kCancelled;
}

std::string Duration(double s) {
  if (s < 0 || s > 360000) return "?";
  char buf[32];
  int t = static_cast<int>(s + 0.5);
  snprintf(buf, sizeof buf, "%d:%02d:%02d", t / 3600, (t / 60) % 60, t % 60);
  return buf;
}

struct Counters {
  size_t done = 0, submitted = 0, skipped = 0, bad_lines = 0, could_not_run = 0, nonzero = 0;
  std::map<std::string, size_t> by_outcome;
};

std::string FailureText(const Counters& c) {
  std::string s;
  for (const auto& [outcome, n] : c.by_outcome) {
    if (outcome == "exit") continue;
    s += (s.empty() ? "" : ", ") + outcome + " " + std::to_string(n);
  }
  if (c.nonzero > 0) s += (s.empty() ? "" : ", ") + std::string("non-zero exit ") + std::to_string(c.nonzero);
  if (c.bad_lines > 0) s += (s.empty() ? "" : ", ") + std::string("bad lines ") + std::to_string(c.bad_lines);
  return s;
}

void DrawProgress(const Counters& c, std::optional<size_t> total, double elapsed_s) {
  double rate = elapsed_s > 0 ? static_cast<double>(c.done) / elapsed_s : 0;
  std::string line = "\r\x1b[K";
  size_t finished = c.done + c.bad_lines + c.skipped;
  if (total) {
    size_t width = 30, filled = *total ? std::min(width, finished * width / *total) : width;
    line += "[" + std::string(filled, '#') + std::string(width - filled, '.') + "] ";
    line += std::to_string(finished) + "/" + std::to_string(*total);
  } else {
    line += std::to_string(finished) + " done";
  }
  char buf[64];
  snprintf(buf, sizeof buf, "  %.1f jobs/s", rate);
  line += buf;
  if (total && rate > 0 && *total >= finished) {
    line += "  ETA " + Duration(static_cast<double>(*total - finished) / rate);
  }
  std::string f = FailureText(c);
  if (!f.empty()) line += "  failed: " + f;
  (void)WriteFd(STDERR_FILENO, line);
}

void PrintSummary(const Counters& c, double elapsed_s, bool interrupted) {
  char head[160];
  snprintf(head, sizeof head, "sandpool map: %zu results in %.1f s (%.1f jobs/s)%s\n", c.done, elapsed_s,
           elapsed_s > 0 ? static_cast<double>(c.done) / elapsed_s : 0.0, interrupted ? ", interrupted" : "");
  std::string t = head;
  t += "  outcome            jobs\n";
  auto row = [&t](const std::string& name, size_t n) {
    char buf[96];
    snprintf(buf, sizeof buf, "  %-16s %6zu\n", name.c_str(), n);
    t += buf;
  };
  for (const auto& [outcome, n] : c.by_outcome) row(outcome, n);
  if (c.nonzero > 0) row("(exit non-zero)", c.nonzero);
  if (c.bad_lines > 0) row("bad lines", c.bad_lines);
  if (c.skipped > 0) row("skipped (resume)", c.skipped);
  (void)WriteFd(STDERR_FILENO, t);
}

Result<std::string> ReadFileAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::Error("cannot open " + path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace

Result<MapOptions> ParseMapOptions(const std::vector<std::string>& args, GlobalOptions* g) {
  MapOptions o;
  bool have_input = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto global = ConsumeGlobalOption(args, &i, g);
    if (!global.ok()) return global.status();
    if (global.value()) continue;
    auto value = [&](const char* name) -> Result<std::string> {
      std::string eq = std::string(name) + "=";
      if (a.starts_with(eq)) return a.substr(eq.size());
      if (i + 1 >= args.size()) return Status::Error(std::string(name) + " needs a value");
      return args[++i];
    };
    auto is = [&](const char* name) { return a == name || a.starts_with(std::string(name) + "="); };
    if (a == "--help" || a == "-h") {
      o.help = true;
    } else if (is("--concurrency")) {
      auto v = value("--concurrency");
      if (!v.ok()) return v.status();
      char* end = nullptr;
      unsigned long n = std::strtoul(v->c_str(), &end, 10);
      if (v->empty() || *end != '\0' || n < 1 || n > 100000) {
        return Status::Error("--concurrency: a number from 1 to 100000 (got '" + v.value() + "')");
      }
      o.concurrency = n;
    } else if (is("--template")) {
      auto v = value("--template");
      if (!v.ok()) return v.status();
      if (!ValidTemplateName(v.value())) return Status::Error("--template: invalid name '" + v.value() + "'");
      o.template_name = v.value();
    } else if (is("--timeout")) {
      auto v = value("--timeout");
      if (!v.ok()) return v.status();
      auto ms = ParseSeconds(v.value());
      if (!ms.ok()) return ms.status().Prefixed("--timeout");
      o.timeout_ms = ms.value();
    } else if (is("--shell")) {
      auto v = value("--shell");
      if (!v.ok()) return v.status();
      o.shell = v.value();
    } else if (a == "--resume") {
      o.resume = true;
    } else if (a == "--fail-on-nonzero") {
      o.fail_on_nonzero = true;
    } else if (a.starts_with("-") && a != "-") {
      return Status::Error("unknown option '" + a + "'");
    } else {
      if (have_input) return Status::Error("one input file only (got '" + o.input + "' and '" + a + "')");
      o.input = a;
      have_input = true;
    }
  }
  return o;
}

std::string ShellQuote(std::string_view s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

std::variant<LineJob, JobError> LineToJob(std::string_view line, size_t line_no, const MapOptions& o,
                                          const std::string& run) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  std::string id = run + "-" + std::to_string(line_no);
  if (o.shell) {
    std::string cmd = *o.shell;
    std::string word = ShellQuote(line);
    if (cmd.find("{}") == std::string::npos) {
      cmd += " " + word;
    } else {
      for (size_t p = 0; (p = cmd.find("{}", p)) != std::string::npos; p += word.size()) cmd.replace(p, 2, word);
    }
    if (cmd.find('\0') != std::string::npos) return JobError{ErrorCode::kBadField, "the line has a NUL byte"};
    JobSpec spec;
    spec.version = 4;
    spec.id = id;
    spec.shell = cmd;
    spec.template_name = o.template_name;
    spec.timeout_ms = o.timeout_ms;
    return LineJob{id, EncodeJobRequest(spec, false)};
  }
  auto parsed = ParseJson(line);
  if (!parsed.ok()) return JobError{ErrorCode::kBadPayload, parsed.status().message()};
  Json job = std::move(parsed.value());
  if (job.kind != Json::Kind::kObject) return JobError{ErrorCode::kBadPayload, "the line is not a JSON object"};
  if (const Json* given = job.Find("id")) {
    if (given->kind != Json::Kind::kString || !ValidJobId(given->s)) {
      return JobError{ErrorCode::kBadField, "id: 1 to 128 characters of [A-Za-z0-9._:-]"};
    }
    id = given->s;
  }
  // v 4 (an entry naming a completion stream needs it), the id, then the defaults.
  std::vector<JsonField> fields;
  Json v;
  v.kind = Json::Kind::kUint;
  v.u = 4;
  fields.emplace_back("v", v);
  Json idv;
  idv.kind = Json::Kind::kString;
  idv.s = id;
  fields.emplace_back("id", idv);
  for (auto& [k, x] : job.fields) {
    if (k != "v" && k != "id") fields.emplace_back(k, std::move(x));
  }
  job.fields = std::move(fields);
  if (!o.template_name.empty() && !job.Find("template")) {
    Json t;
    t.kind = Json::Kind::kString;
    t.s = o.template_name;
    job.fields.emplace_back("template", t);
  }
  if (o.timeout_ms > 0 && !job.Find("timeout_ms")) {
    Json t;
    t.kind = Json::Kind::kUint;
    t.u = o.timeout_ms;
    job.fields.emplace_back("timeout_ms", t);
  }
  std::string payload = JsonToMsgpack(job);
  // What no daemon accepts is refused here, with the daemon's own checks; sizes are left to the
  // daemon (its limits may differ from the defaults).
  auto decoded = DecodeJob(payload, ServerLimits{});
  if (auto* err = std::get_if<JobError>(&decoded); err != nullptr && err->code != ErrorCode::kTooLarge) {
    return *err;
  }
  return LineJob{id, std::move(payload)};
}

Resumed ReadResumed(std::string_view output) {
  Resumed r;
  static const std::regex generated("^(map-[0-9a-f]{8})-[0-9]+$");
  size_t start = 0;
  while (start < output.size()) {
    size_t end = output.find('\n', start);
    if (end == std::string_view::npos) end = output.size();
    auto json = ParseJson(output.substr(start, end - start));
    start = end + 1;
    if (!json.ok()) continue;  // a line cut by a kill: its job runs again (same id: once)
    const Json* id = json->Find("id");
    if (id == nullptr || id->kind != Json::Kind::kString) continue;
    r.ids.insert(id->s);
    std::smatch m;
    if (r.run.empty() && std::regex_match(id->s, m, generated)) r.run = m[1];
  }
  return r;
}

int MapCommand(const std::vector<std::string>& args, GlobalOptions g) {
  auto parsed = ParseMapOptions(args, &g);
  if (!parsed.ok()) {
    PrintError(parsed.status().message());
    PrintError("see 'sandpool map --help'");
    return kExitUsage;
  }
  const MapOptions& o = parsed.value();
  if (o.help) {
    (void)WriteFd(STDOUT_FILENO, kMapHelp);
    return 0;
  }
  auto url = ParseRedisUrl(g.redis_url);
  if (!url.ok()) {
    PrintError(url.status().message());
    return kExitUsage;
  }

  // Resume: the output so far is stdout's file itself.
  Resumed resumed;
  if (o.resume) {
    struct stat st;
    if (fstat(STDOUT_FILENO, &st) != 0 || !S_ISREG(st.st_mode)) {
      PrintError("--resume: stdout must be the output file of the interrupted run (sandpool map --resume ... >> FILE)");
      return kExitUsage;
    }
    auto text = ReadFileAll("/proc/self/fd/1");
    if (!text.ok()) {
      PrintError("--resume: " + text.status().message());
      return kExitFailure;
    }
    resumed = ReadResumed(text.value());
    if (!text->empty() && text->back() != '\n') (void)WriteFd(STDOUT_FILENO, "\n");  // a cut last line
  }

  std::ifstream file;
  std::istream* in = &std::cin;
  std::optional<size_t> total;
  if (o.input != "-") {
    file.open(o.input, std::ios::binary);
    if (!file) {
      PrintError("cannot open " + o.input);
      return kExitUsage;
    }
    size_t lines = 0;
    std::string l;
    while (std::getline(file, l)) lines += Blank(l) ? 0 : 1;
    total = lines;
    file.clear();
    file.seekg(0);
    in = &file;
  }

  auto redis_or = SyncRedis::Connect(url.value());
  if (!redis_or.ok()) {
    PrintError(redis_or.status().message());
    return kExitFailure;
  }
  SyncRedis& redis = *redis_or.value();
  Keys keys(g.prefix);
  const std::string run = !resumed.run.empty() ? resumed.run : "map-" + RandomHex(8);
  // The stream's name is not guessable from the job ids (64 random bits: docs/SECURITY.md 4).
  const std::string notify = run + "-" + RandomHex(16);
  const std::string stream = g.prefix + ":notify:" + notify;
  const std::string queue = keys.Queue(g.queue);

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  const bool tty = isatty(STDERR_FILENO) == 1;
  const int64_t started = MonotonicUs();
  int64_t last_draw = 0;
  Counters c;
  std::map<std::string, size_t> in_flight;  // id -> line number
  std::string last = "0";
  size_t line_no = 0;
  bool eof = false;
  Status failed;

  auto emit = [&](const std::string& line) {
    if (Status s = WriteFd(STDOUT_FILENO, line); !s.ok()) failed = s.Prefixed("writing the results");
  };
  auto finish = [&](const JobResult& r) {
    auto it = in_flight.find(r.id);
    if (it == in_flight.end()) return;  // a second record of a job (at least once)
    emit(ResultLine(r, it->second));
    in_flight.erase(it);
    ++c.done;
    ++c.by_outcome[std::string(OutcomeName(r.outcome))];
    if (CouldNotRun(r)) ++c.could_not_run;
    if (r.outcome == Outcome::kExit && r.exit_code && *r.exit_code != 0) ++c.nonzero;
  };

  while (!g_stop && failed.ok()) {
    // Fill the free slots, in one pipelined round trip.
    std::vector<std::string> sent;
    std::string line;
    while (!eof && in_flight.size() < o.concurrency) {
      if (!std::getline(*in, line)) {
        eof = true;
        break;
      }
      ++line_no;
      if (Blank(line)) continue;
      auto job = LineToJob(line, line_no, o, run);
      if (auto* err = std::get_if<JobError>(&job)) {
        emit(ErrorLine(run + "-" + std::to_string(line_no), line_no, *err));
        ++c.bad_lines;
        continue;
      }
      LineJob& j = std::get<LineJob>(job);
      if (resumed.ids.count(j.id)) {
        ++c.skipped;
        continue;
      }
      if (in_flight.count(j.id)) {
        emit(ErrorLine(j.id, line_no, JobError{ErrorCode::kBadField, "id '" + j.id + "' is already in flight"}));
        ++c.bad_lines;
        continue;
      }
      in_flight[j.id] = line_no;
      if (Status s = redis.Append({"XADD", queue, "*", "id", j.id, "job", j.payload, "notify", notify,
                                   "notify_result", "1"});
          !s.ok()) {
        failed = s;
        break;
      }
      sent.push_back(j.id);
      ++c.submitted;
    }
    for (size_t k = 0; k < sent.size() && failed.ok(); ++k) {
      auto reply = redis.ReadReply(30000);
      if (!reply.ok()) failed = reply.status().Prefixed("submitting");
    }
    if (!failed.ok()) break;
    if (eof && in_flight.empty()) break;

    auto reply = redis.Command({"XREAD", "COUNT", "1000", "BLOCK", "200", "STREAMS", stream, last});
    if (!reply.ok()) {
      failed = reply.status().Prefixed("reading completions");
      break;
    }
    std::vector<std::string> fetch;
    redisReply* r = reply.value().get();
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->elements == 2) {
      redisReply* entries = r->element[0]->element[1];
      for (size_t e = 0; e < entries->elements; ++e) {
        redisReply* entry = entries->element[e];
        last = std::string(entry->element[0]->str, entry->element[0]->len);
        redisReply* f = entry->element[1];
        std::string id, result;
        for (size_t k = 0; k + 1 < f->elements; k += 2) {
          std::string_view name(f->element[k]->str, f->element[k]->len);
          std::string value(f->element[k + 1]->str, f->element[k + 1]->len);
          if (name == "id") id = value;
          else if (name == "result") result = value;
        }
        if (!in_flight.count(id)) continue;
        auto decoded = result.empty() ? std::nullopt : DecodeResult(result);
        if (decoded) finish(*decoded);
        else fetch.push_back(id);
      }
    }
    for (const std::string& id : fetch) {
      auto got = redis.Command({"GET", keys.Result(id)});
      if (!got.ok()) {
        failed = got.status();
        break;
      }
      if (got.value()->type != REDIS_REPLY_STRING) continue;  // expired: nothing more will come
      auto decoded = DecodeResult(std::string_view(got.value()->str, got.value()->len));
      if (decoded) finish(*decoded);
    }
    int64_t now = MonotonicUs();
    if (tty && now - last_draw > 100000) {
      DrawProgress(c, total, static_cast<double>(now - started) / 1e6);
      last_draw = now;
    }
  }

  bool interrupted = g_stop.load();
  if (!in_flight.empty() && (interrupted || !failed.ok())) {
    // Stopped early: the jobs in flight are cancelled (PROTOCOL.md section 7, one MULTI).
    (void)redis.Command({"MULTI"});
    for (const auto& [id, _] : in_flight) {
      (void)redis.Command({"HSET", keys.Job(id), "cancel", "1"});
      (void)redis.Command({"EXPIRE", keys.Job(id), "86400"});
      (void)redis.Command({"PUBLISH", keys.Cancel(), id});
    }
    (void)redis.Command({"EXEC"});
  }
  (void)redis.Command({"DEL", stream});
  double elapsed = static_cast<double>(MonotonicUs() - started) / 1e6;
  if (tty) {
    DrawProgress(c, total, elapsed);
    (void)WriteFd(STDERR_FILENO, "\n");
  }
  PrintSummary(c, elapsed, interrupted);
  if (!failed.ok()) {
    PrintError(failed.message());
    return kExitFailure;
  }
  if (interrupted) return 130;
  if (c.bad_lines > 0 || c.could_not_run > 0) return 1;
  size_t succeeded = c.by_outcome["exit"] - c.nonzero;  // exit code 0
  if (o.fail_on_nonzero && c.done > succeeded) return 1;
  return 0;
}

}  // namespace sandpool::cli
