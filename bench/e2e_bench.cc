// sandpool_bench: end-to-end benchmark client for sandpoold, plus process-spawning peers timed by
// the same binary (bwrap, plain posix_spawn, a cold python3) so that ratios are fair.
//
// Every measurement prints one JSON line on stdout (the same shape as bench/peers/*.mjs) and a
// human-readable row on stderr. bench/run.sh starts Redis and the daemon and calls this.
// Longer than 800 lines on purpose: one driver for sandpool and every peer, so all of them are
// timed by the same code (the ratios are only fair that way).
//
//   sandpool_bench --redis unix:///tmp/x.sock --modes latency,throughput,peers [options]
//
// latency:    N sequential jobs after W warm-up jobs; each: XADD, wait for `exited` (the
//             subscription, one PSUBSCRIBE <prefix>:out:*, is active before the first XADD).
//             Also prints a per-job time breakdown (XADD round trip, XADD -> started,
//             started -> exited, the daemon's exec_time_us / queue_wait_us / cpu_time_us).
// throughput: K jobs kept in flight until M jobs are done; jobs/s, latency percentiles and CPU
//             per job (the daemon's process tree, Redis, this client, the whole host).
// peers:      bwrap / posix_spawn(/bin/true) / /usr/bin/python3 -c 'print(1)' (and the import job's
//             code), N runs each, with a job's default environment (PeerEnvironment).
// Job kinds (--kinds for latency, --tp-kinds for throughput): echo (shell `echo hi`), true (argv
// /bin/true), py (code `print(1)`, runtime python), pyimport (code importing json, re, math).
// --template NAME sends the echo and true jobs to that template (the job map's `template`); without
// it they name none and the daemon uses `default`. Code jobs keep routing by their runtime.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/job_env.h"
#include "common/status.h"
#include "queue/keys.h"
#include "queue/protocol.h"
#include "queue/redis_sync.h"
#include "queue/redis_url.h"

namespace sandpool::bench {
namespace {

// ---------------------------------------------------------------------------------------------
// Options

// The peers sandpool_bench can run (--peers), in the order it runs them.
const std::vector<std::string> kPeerNames = {"bwrap", "true", "echo", "node", "python", "pyimport"};

struct Options {
  std::string redis;
  std::string prefix = "sandpool";
  std::string queue = "default";
  std::vector<std::string> modes = {"latency", "throughput", "peers"};
  int n = 500;               // sequential jobs per kind (latency)
  int warmup = 50;           // warm-up jobs before each latency series / throughput run
  int tp_n = 3000;           // jobs per throughput run
  int pace_ms = 0;           // latency: idle time between sequential jobs (0: back to back)
  std::string tp_variant = "isolated";  // throughput: the variant its lines carry (run.sh: isolated-1core)
  std::vector<int> inflight = {8, 64};
  std::vector<std::string> kinds = {"echo", "true", "py", "pyimport"};  // latency job kinds
  std::vector<std::string> tp_kinds = {"echo"};                         // throughput job kinds
  int peer_n = 300;          // runs per peer
  int peer_inflight = 8;     // peers are also run with this many in flight (0: skip)
  int peer_tp_n = 600;       // runs for the peer throughput measurement
  // Which peers run (--peers): bwrap, true, echo, node, python, pyimport; and the variant their
  // lines carry instead of each peer's own (--peer-variant; run.sh's alternated rounds: paired-N).
  std::vector<std::string> peers = kPeerNames;
  std::string peer_variant;
  int idle_timeout_ms = 30000;  // no event for this long while jobs are pending: report as lost
  pid_t daemon_pid = 0;      // for CPU accounting (0: skip)
  std::string sandbox_cgroup;  // the daemon's instance cgroup (cpuacct or v2): sandboxes' CPU
  pid_t redis_pid = 0;
  std::string bwrap = "/usr/bin/bwrap";
  std::string python = "/usr/bin/python3";
  std::string template_name;  // echo/true jobs: the job map's `template` (empty: none sent)
  std::string metrics_url;    // the daemon's /metrics (its carried reads: AddRedisCalls)
  bool print_job_env = false;  // --job-env: print PeerEnvironment() and exit
};

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string_view::npos) end = s.size();
    if (end > start) out.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

[[noreturn]] void Usage(const char* msg) {
  if (msg != nullptr) std::fprintf(stderr, "sandpool_bench: %s\n", msg);
  std::fprintf(stderr,
               "usage: sandpool_bench --redis URL [--prefix P] [--queue Q]\n"
               "  [--modes latency,throughput,peers] [--n N] [--warmup W] [--tp-n M]\n"
               "  [--inflight 8,64] [--kinds echo,true,py,pyimport,node] [--tp-kinds echo,py,node] [--variant V] [--pace-ms MS] [--peer-n N] [--peer-inflight K] [--peer-tp-n M]\n"
               "  [--peers bwrap,true,echo,node,python,pyimport] [--peer-variant V]\n"
               "  [--idle-timeout-ms MS] [--daemon-pid PID] [--sandbox-cgroup DIR] [--redis-pid PID] [--template NAME]\n"
               "  [--metrics-url http://HOST:PORT/metrics]\n"
               "  [--bwrap PATH] [--python PATH]\n"
               "  sandpool_bench --job-env: print the environment the peers run with, one NAME=value a line\n");
  std::exit(2);
}

int ParseInt(const char* s, const char* what) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < 0 || v > 100000000) {
    std::string m = std::string("bad value for ") + what + ": " + s;
    Usage(m.c_str());
  }
  return static_cast<int>(v);
}

Options ParseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) Usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    if (a == "--redis") o.redis = next();
    else if (a == "--prefix") o.prefix = next();
    else if (a == "--queue") o.queue = next();
    else if (a == "--modes") o.modes = Split(next(), ',');
    else if (a == "--n") o.n = ParseInt(next(), "--n");
    else if (a == "--warmup") o.warmup = ParseInt(next(), "--warmup");
    else if (a == "--variant") o.tp_variant = next();
    else if (a == "--sandbox-cgroup") o.sandbox_cgroup = next();
    else if (a == "--tp-n") o.tp_n = ParseInt(next(), "--tp-n");
    else if (a == "--pace-ms") o.pace_ms = ParseInt(next(), "--pace-ms");
    else if (a == "--kinds") o.kinds = Split(next(), ',');
    else if (a == "--tp-kinds") o.tp_kinds = Split(next(), ',');
    else if (a == "--inflight") {
      o.inflight.clear();
      for (const auto& k : Split(next(), ',')) o.inflight.push_back(ParseInt(k.c_str(), "--inflight"));
    } else if (a == "--peer-n") o.peer_n = ParseInt(next(), "--peer-n");
    else if (a == "--peer-inflight") o.peer_inflight = ParseInt(next(), "--peer-inflight");
    else if (a == "--peer-tp-n") o.peer_tp_n = ParseInt(next(), "--peer-tp-n");
    else if (a == "--peers") {
      o.peers = Split(next(), ',');
      for (const auto& p : o.peers) {
        if (std::find(kPeerNames.begin(), kPeerNames.end(), p) == kPeerNames.end()) {
          Usage(("unknown peer " + p + " (see --peers in the usage)").c_str());
        }
      }
    } else if (a == "--peer-variant") o.peer_variant = next();
    else if (a == "--idle-timeout-ms") o.idle_timeout_ms = ParseInt(next(), "--idle-timeout-ms");
    else if (a == "--daemon-pid") o.daemon_pid = ParseInt(next(), "--daemon-pid");
    else if (a == "--redis-pid") o.redis_pid = ParseInt(next(), "--redis-pid");
    else if (a == "--metrics-url") o.metrics_url = next();
    else if (a == "--bwrap") o.bwrap = next();
    else if (a == "--python") o.python = next();
    else if (a == "--template") {
      o.template_name = next();
      if (!ValidTemplateName(o.template_name)) Usage(("bad template name " + o.template_name).c_str());
    }
    else if (a == "--job-env") o.print_job_env = true;
    else if (a == "--help" || a == "-h") Usage(nullptr);
    else Usage(("unknown option " + a).c_str());
  }
  return o;
}

bool HasMode(const Options& o, std::string_view m) {
  return std::find(o.modes.begin(), o.modes.end(), m) != o.modes.end();
}

// ---------------------------------------------------------------------------------------------
// Statistics and output

double Percentile(std::vector<double> v, double p) {  // nearest rank
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  if (rank < 1) rank = 1;
  return v[std::min(rank, v.size()) - 1];
}

double Mean(const std::vector<double>& v) {
  if (v.empty()) return std::nan("");
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

std::string JsonEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string Num(double x) {
  if (std::isnan(x) || std::isinf(x)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4f", x);
  // Trim trailing zeros for readability.
  std::string s = buf;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

// One measurement = one JSON line. Field names are shared with bench/peers/*.mjs.
struct Measurement {
  std::string system;    // sandpool, bwrap, posix_spawn, python3
  std::string variant;   // e.g. "isolated", "unshare-all"
  std::string mode;      // latency | throughput | per_run | breakdown
  std::string command;   // what ran
  std::string template_name;  // the template the jobs named (empty: none; JSON "template")
  int inflight = 1;
  int n = 0;             // completed samples
  int errors = 0;        // completed with an unexpected result
  int lost = 0;          // never completed
  std::vector<double> samples_ms;
  double wall_s = 0;     // throughput: wall time of the timed part
  std::vector<std::pair<std::string, double>> extra;
  std::string note;      // first error, "not measured: ...", ...
  bool measured = true;
};

void Emit(const Measurement& m) {
  std::ostringstream j;
  j << "{\"system\":\"" << JsonEscape(m.system) << "\",\"variant\":\"" << JsonEscape(m.variant)
    << "\",\"mode\":\"" << m.mode << "\",\"command\":\"" << JsonEscape(m.command)
    << "\",\"measured\":" << (m.measured ? "true" : "false");
  if (!m.template_name.empty()) j << ",\"template\":\"" << JsonEscape(m.template_name) << "\"";
  if (m.measured) {
    j << ",\"inflight\":" << m.inflight << ",\"n\":" << m.n << ",\"errors\":" << m.errors
      << ",\"lost\":" << m.lost;
    if (!m.samples_ms.empty()) {
      j << ",\"p50_ms\":" << Num(Percentile(m.samples_ms, 50))
        << ",\"p90_ms\":" << Num(Percentile(m.samples_ms, 90))
        << ",\"p99_ms\":" << Num(Percentile(m.samples_ms, 99))
        << ",\"max_ms\":" << Num(Percentile(m.samples_ms, 100))
        << ",\"mean_ms\":" << Num(Mean(m.samples_ms));
    }
    if (m.wall_s > 0) {
      j << ",\"wall_s\":" << Num(m.wall_s)
        << ",\"per_s\":" << Num(static_cast<double>(m.n) / m.wall_s);
    }
    for (const auto& [k, v] : m.extra) j << ",\"" << JsonEscape(k) << "\":" << Num(v);
  }
  if (!m.note.empty()) j << ",\"note\":\"" << JsonEscape(m.note) << "\"";
  j << "}";
  std::printf("%s\n", j.str().c_str());
  std::fflush(stdout);

  std::string label = m.system + "/" + m.variant + " " + m.mode + " [" + m.command + "]";
  if (!m.template_name.empty()) label += " @" + m.template_name;
  if (m.inflight > 1) label += " x" + std::to_string(m.inflight);
  if (!m.measured) {
    std::fprintf(stderr, "%-62s %s\n", label.c_str(), m.note.c_str());
    return;
  }
  if (m.samples_ms.empty()) {
    std::fprintf(stderr, "%-62s n=%d errors=%d lost=%d %s\n", label.c_str(), m.n, m.errors, m.lost,
                 m.note.c_str());
  } else {
    std::fprintf(stderr, "%-62s n=%-5d p50 %7.3f  p90 %7.3f  p99 %7.3f  max %8.3f ms", label.c_str(),
                 m.n, Percentile(m.samples_ms, 50), Percentile(m.samples_ms, 90),
                 Percentile(m.samples_ms, 99), Percentile(m.samples_ms, 100));
    if (m.wall_s > 0) std::fprintf(stderr, "  %8.1f /s", static_cast<double>(m.n) / m.wall_s);
    if (m.errors || m.lost) std::fprintf(stderr, "  errors=%d lost=%d", m.errors, m.lost);
    std::fprintf(stderr, "\n");
  }
  for (const auto& [k, v] : m.extra) std::fprintf(stderr, "    %-40s %10.3f\n", k.c_str(), v);
  if (!m.note.empty() && m.measured) std::fprintf(stderr, "    note: %s\n", m.note.c_str());
}

// ---------------------------------------------------------------------------------------------
// CPU accounting (ticks of USER_HZ)

int64_t Ticks() { return sysconf(_SC_CLK_TCK); }

// utime + stime + cutime + cstime of one process, in clock ticks (0 if gone); *own_out: utime +
// stime alone.
int64_t ProcTicks(pid_t pid, pid_t* ppid_out = nullptr, int64_t* own_out = nullptr) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return 0;
  size_t rp = line.rfind(')');
  if (rp == std::string::npos) return 0;
  std::istringstream rest(line.substr(rp + 2));
  std::vector<std::string> fields;
  std::string tok;
  while (rest >> tok) fields.push_back(tok);
  // fields[0] = state (field 3); utime is field 14 -> index 11.
  if (fields.size() < 15) return 0;
  if (ppid_out != nullptr) *ppid_out = static_cast<pid_t>(std::atol(fields[1].c_str()));
  if (own_out != nullptr) *own_out = std::atoll(fields[11].c_str()) + std::atoll(fields[12].c_str());
  return std::atoll(fields[11].c_str()) + std::atoll(fields[12].c_str()) +
         std::atoll(fields[13].c_str()) + std::atoll(fields[14].c_str());
}

// CPU of a process and all its live descendants (children already reaped count through
// cutime/cstime of their parent). The daemon's sandboxes are reaped by its keepers, so this covers
// the daemon, spawner, keepers and every finished sandbox.
struct ProcCpu {
  pid_t ppid = 0;
  int64_t ticks = 0;  // utime + stime + cutime + cstime
  int64_t own = 0;    // utime + stime
};

// Every process of the host, by pid.
std::map<pid_t, ProcCpu> ReadProcs() {
  std::map<pid_t, ProcCpu> procs;
  DIR* d = opendir("/proc");
  if (d == nullptr) return procs;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    ProcCpu c;
    c.ticks = ProcTicks(static_cast<pid_t>(pid), &c.ppid, &c.own);
    procs[static_cast<pid_t>(pid)] = c;
  }
  closedir(d);
  return procs;
}

int64_t TreeTicks(pid_t root) {
  if (root <= 0) return 0;
  std::map<pid_t, ProcCpu> procs = ReadProcs();
  int64_t total = 0;
  for (const auto& [pid, info] : procs) {
    pid_t p = pid;
    for (int depth = 0; depth < 64 && p > 1; ++depth) {
      if (p == root) {
        total += info.ticks;
        break;
      }
      auto it = procs.find(p);
      if (it == procs.end()) break;
      p = it->second.ppid;
    }
  }
  return total;
}

// The daemon's host side: its own CPU and that of its children (spawner, preview proxy) and
// grandchildren (keepers), utime + stime only; everything below them is a sandbox, counted from
// the sandboxes' cgroup instead (SandboxCgroupNs). Why: a process's CPU reaches the tree's
// figures only through the cutime of the parent that reaps it, and a sandbox killed with its
// parent (a nursery mother, whose reaped inits carry every job's CPU, when a slot is retired)
// takes that CPU with it; the cgroup keeps it.
int64_t HostSideTicks(pid_t root) {
  if (root <= 0) return 0;
  std::map<pid_t, ProcCpu> procs = ReadProcs();
  int64_t total = 0;
  for (const auto& [pid, info] : procs) {
    auto parent = procs.find(info.ppid);
    bool child = info.ppid == root;
    bool grandchild = parent != procs.end() && parent->second.ppid == root;
    if (pid == root || child || grandchild) total += info.own;
  }
  return total;
}

// CPU of every sandbox of the daemon, dead or alive, in ns: its instance cgroup (v1 cpuacct.usage
// or v2 cpu.stat usage_usec). -1 when there is none to read.
int64_t SandboxCgroupNs(const std::string& dir) {
  if (dir.empty()) return -1;
  std::ifstream v1(dir + "/cpuacct.usage");
  int64_t ns = -1;
  if (v1 >> ns) return ns;
  std::ifstream v2(dir + "/cpu.stat");
  for (std::string key; v2 >> key;) {
    int64_t v = 0;
    v2 >> v;
    if (key == "usage_usec") return v * 1000;
  }
  return -1;
}

// Busy ticks of the whole host (all CPUs) and steal.
std::pair<int64_t, int64_t> HostTicks() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  int64_t v[10] = {};
  f >> cpu;
  for (auto& x : v) f >> x;
  // user nice system idle iowait irq softirq steal guest guest_nice
  int64_t busy = v[0] + v[1] + v[2] + v[5] + v[6];
  return {busy, v[7]};
}

int64_t SelfCpuUs() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (int64_t{ru.ru_utime.tv_sec} + ru.ru_stime.tv_sec) * 1000000 + ru.ru_utime.tv_usec +
         ru.ru_stime.tv_usec;
}

int64_t ChildrenCpuUs() {
  struct rusage ru;
  getrusage(RUSAGE_CHILDREN, &ru);
  return (int64_t{ru.ru_utime.tv_sec} + ru.ru_stime.tv_sec) * 1000000 + ru.ru_utime.tv_usec +
         ru.ru_stime.tv_usec;
}

struct CpuSnap {
  int64_t daemon = 0, redis = 0, host = 0, steal = 0, self_us = 0;
  int64_t host_side = 0, sandboxes_ns = -1;  // with --sandbox-cgroup
};

CpuSnap TakeCpu(const Options& o) {
  CpuSnap s;
  s.daemon = TreeTicks(o.daemon_pid);
  s.sandboxes_ns = SandboxCgroupNs(o.sandbox_cgroup);
  if (s.sandboxes_ns >= 0) s.host_side = HostSideTicks(o.daemon_pid);
  s.redis = o.redis_pid > 0 ? ProcTicks(o.redis_pid) : 0;
  auto [busy, steal] = HostTicks();
  s.host = busy;
  s.steal = steal;
  s.self_us = SelfCpuUs();
  return s;
}

void AddCpu(Measurement& m, const Options& o, const CpuSnap& a, const CpuSnap& b, int jobs) {
  if (jobs <= 0) return;
  double tick_ms = 1000.0 / static_cast<double>(Ticks());
  double nj = jobs;
  if (o.daemon_pid > 0 && a.sandboxes_ns >= 0 && b.sandboxes_ns >= 0) {
    double sandboxes_ms = static_cast<double>(b.sandboxes_ns - a.sandboxes_ns) / 1e6;
    double host_side_ms = static_cast<double>(b.host_side - a.host_side) * tick_ms;
    m.extra.push_back({"cpu_ms_per_job_daemon_tree", (sandboxes_ms + host_side_ms) / nj});
    m.extra.push_back({"cpu_ms_per_job_sandboxes", sandboxes_ms / nj});
    m.extra.push_back({"cpu_ms_per_job_daemon_host_side", host_side_ms / nj});
  } else if (o.daemon_pid > 0) {
    m.extra.push_back({"cpu_ms_per_job_daemon_tree", (b.daemon - a.daemon) * tick_ms / nj});
  }
  if (o.redis_pid > 0) m.extra.push_back({"cpu_ms_per_job_redis", (b.redis - a.redis) * tick_ms / nj});
  m.extra.push_back({"cpu_ms_per_job_client", (b.self_us - a.self_us) / 1000.0 / nj});
  m.extra.push_back({"cpu_ms_per_job_host_total", (b.host - a.host) * tick_ms / nj});
  m.extra.push_back({"host_steal_ms_total", (b.steal - a.steal) * tick_ms});
}

// ---------------------------------------------------------------------------------------------
// sandpool client

std::string_view Str(const redisReply* r) {
  if (r == nullptr || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS)) return {};
  return std::string_view(r->str, r->len);
}

struct JobKind {
  std::string name;     // JSON "command"
  JobSpec spec;         // id filled per job
  std::string expect_stdout;
};

JobKind ShellEcho() {
  JobKind k;
  k.name = "shell: echo hi";
  k.spec.shell = "echo hi";
  k.expect_stdout = "hi\n";
  return k;
}

JobKind ArgvTrue() {
  JobKind k;
  k.name = "argv: /bin/true";
  k.spec.argv = {"/bin/true"};
  return k;
}

// Code jobs: no template named, so the daemon routes them to its template of that runtime
// (`python`: a warm python3 that already imported its common modules; `node`) when it has one
// (PROTOCOL.md section 3).
JobKind CodeKind(const char* runtime, const char* code, const char* expect) {
  JobKind k;
  k.name = std::string("code ") + runtime + ": " + code;
  k.spec.code = code;
  k.spec.runtime = runtime;
  k.expect_stdout = expect;
  return k;
}

JobKind PyPrint() { return CodeKind("python", "print(1)", "1\n"); }
JobKind NodeLog() { return CodeKind("node", "console.log(1)", "1\n"); }

JobKind PyImport() {
  JobKind k = CodeKind("python", "import json, re, math; print(json.dumps([re.sub('a', 'b', 'a'), math.floor(2.5)]))",
                       "[\"b\", 2]\n");
  k.name = "code python: import json, re, math";  // the name the reports look for
  return k;
}

std::optional<JobKind> KindByName(std::string_view n) {
  if (n == "node") return NodeLog();
  if (n == "echo") return ShellEcho();
  if (n == "true") return ArgvTrue();
  if (n == "py") return PyPrint();
  if (n == "pyimport") return PyImport();
  return std::nullopt;
}

// The kind named `n` as this run sends it: echo and true jobs name --template when given (code jobs
// are routed by their runtime, so a template of another runtime must not capture them).
std::optional<JobKind> KindFor(const Options& o, std::string_view n) {
  auto k = KindByName(n);
  if (k && !o.template_name.empty() && !k->spec.code) k->spec.template_name = o.template_name;
  return k;
}

struct Pending {
  int64_t t_submit_us = 0;
  int64_t t_xadd_done_us = 0;
  int64_t t_started_us = 0;
};

struct Done {
  std::string id;
  int64_t t_exited_us = 0;
  Pending p;
  JobResult result;
};

class Client {
 public:
  Client(const Options& o) : opts_(o), keys_(o.prefix) {
    stream_ = keys_.Queue(o.queue);
    out_prefix_ = keys_.Out("");
    run_tag_ = std::to_string(getpid()) + "-" + std::to_string(WallMs() % 100000000);
  }

  Status Init() {
    auto url = ParseRedisUrl(opts_.redis);
    if (!url.ok()) return url.status();
    auto c = SyncRedis::Connect(*url);
    if (!c.ok()) return c.status();
    cmd_ = std::move(c).value();
    auto s = SyncRedis::Connect(*url);
    if (!s.ok()) return s.status();
    sub_ = std::move(s).value();
    SP_RETURN_IF_ERROR(sub_->Append({"PSUBSCRIBE", out_prefix_ + "*"}));
    auto ack = sub_->ReadReply(5000);
    if (!ack.ok()) return ack.status().Prefixed("PSUBSCRIBE");
    const redisReply* r = ack.value().get();
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || Str(r->element[0]) != "psubscribe") {
      return Status::Error("PSUBSCRIBE: unexpected reply");
    }
    return Status::Ok();
  }

  // INFO commandstats: command -> (calls, usec). Empty if Redis would not say.
  std::map<std::string, std::pair<int64_t, int64_t>> CommandStats() {
    std::map<std::string, std::pair<int64_t, int64_t>> out;
    auto r = cmd_->Command({"INFO", "commandstats"});
    if (!r.ok() || r.value()->type != REDIS_REPLY_STRING) return out;
    std::istringstream in(std::string(r.value()->str, r.value()->len));
    for (std::string line; std::getline(in, line);) {
      // cmdstat_<name>:calls=N,usec=U,...
      if (line.rfind("cmdstat_", 0) != 0) continue;
      size_t colon = line.find(':');
      size_t calls = line.find("calls=");
      size_t usec = line.find(",usec=");
      if (colon == std::string::npos || calls == std::string::npos || usec == std::string::npos) continue;
      out[line.substr(8, colon - 8)] = {std::atoll(line.c_str() + calls + 6), std::atoll(line.c_str() + usec + 6)};
    }
    return out;
  }

  std::string NextId(std::string_view tag) {
    return "b-" + run_tag_ + "-" + std::string(tag) + "-" + std::to_string(++counter_);
  }

  // XADD one job; records timestamps in pending_.
  Status Submit(const JobKind& kind, const std::string& id) {
    JobSpec spec = kind.spec;
    spec.id = id;
    std::string payload = EncodeJobRequest(spec, false);
    Pending p;
    p.t_submit_us = MonotonicUs();
    pending_[id] = p;
    auto r = cmd_->Command({"XADD", stream_, "*", "id", id, "job", payload});
    if (!r.ok()) {
      pending_.erase(id);
      return r.status().Prefixed("XADD");
    }
    pending_[id].t_xadd_done_us = MonotonicUs();
    return Status::Ok();
  }

  // Waits for the next `exited` event of a pending job. nullopt: nothing for idle_timeout_ms.
  Result<std::optional<Done>> NextDone() {
    for (;;) {
      auto reply = sub_->ReadReply(opts_.idle_timeout_ms);
      if (!reply.ok()) {
        if (reply.status().sys_errno() == ETIMEDOUT) return std::optional<Done>();
        return reply.status().Prefixed("subscriber");
      }
      int64_t now = MonotonicUs();
      const redisReply* r = reply.value().get();
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 4 || Str(r->element[0]) != "pmessage") {
        continue;
      }
      std::string_view chan = Str(r->element[2]);
      if (chan.substr(0, out_prefix_.size()) != out_prefix_) continue;
      std::string id(chan.substr(out_prefix_.size()));
      auto it = pending_.find(id);
      if (it == pending_.end()) continue;  // not ours (or already done)
      auto ev = DecodeEvent(Str(r->element[3]));
      if (!ev) {
        ++undecodable_events_;
        continue;
      }
      if (ev->type == "started") {
        if (it->second.t_started_us == 0) it->second.t_started_us = now;
      } else if (ev->type == "exited" && ev->result) {
        Done d;
        d.id = id;
        d.t_exited_us = now;
        d.p = it->second;
        d.result = std::move(*ev->result);
        pending_.erase(it);
        return std::optional<Done>(std::move(d));
      }
    }
  }

  // After a timeout: how many pending jobs have a stored result (their exited event was lost)
  // and how many have none (lost or stuck). Describes a few for the report.
  std::string DescribePending(int* with_result, int* without_result) {
    *with_result = *without_result = 0;
    std::string desc;
    int shown = 0;
    for (const auto& [id, p] : pending_) {
      auto r = cmd_->Command({"GET", keys_.Result(id)});
      bool has = r.ok() && r.value()->type == REDIS_REPLY_STRING;
      (has ? *with_result : *without_result) += 1;
      if (shown < 3) {
        auto st = cmd_->Command({"HGETALL", keys_.Job(id)});
        std::string state;
        if (st.ok() && st.value()->type == REDIS_REPLY_ARRAY) {
          for (size_t i = 0; i + 1 < st.value()->elements; i += 2) {
            state += std::string(Str(st.value()->element[i])) + "=" +
                     std::string(Str(st.value()->element[i + 1])) + " ";
          }
        }
        desc += id + (has ? " [result stored, no exited event]" : " [no result]") + " job{" +
                state + "}; ";
        ++shown;
      }
    }
    auto xl = cmd_->Command({"XLEN", stream_});
    if (xl.ok() && xl.value()->type == REDIS_REPLY_INTEGER) {
      desc += "XLEN " + stream_ + " = " + std::to_string(xl.value()->integer);
    }
    return desc;
  }

  size_t pending() const { return pending_.size(); }
  int idle_timeout_ms() const { return opts_.idle_timeout_ms; }
  void ClearPending() { pending_.clear(); }
  int undecodable_events() const { return undecodable_events_; }

 private:
  const Options& opts_;
  Keys keys_;
  std::string stream_, out_prefix_, run_tag_;
  uint64_t counter_ = 0;
  std::unique_ptr<SyncRedis> cmd_, sub_;
  std::unordered_map<std::string, Pending> pending_;
  int undecodable_events_ = 0;
};

// Empty when the result is what the job should produce; else a short description.
std::string CheckResult(const JobKind& kind, const JobResult& r) {
  if (r.outcome == Outcome::kExit && r.exit_code == 0 &&
      (kind.expect_stdout.empty() || r.stdout_data == kind.expect_stdout)) {
    return {};
  }
  std::string s = "outcome=" + std::string(OutcomeName(r.outcome));
  if (r.exit_code) s += " exit_code=" + std::to_string(*r.exit_code);
  if (r.error) s += " error=" + std::string(ErrorCodeName(r.error->code)) + ": " + r.error->message;
  if (r.stdout_data != kind.expect_stdout) s += " stdout='" + r.stdout_data.substr(0, 80) + "'";
  if (!r.stderr_data.empty()) s += " stderr='" + r.stderr_data.substr(0, 200) + "'";
  s += " exec_time_us=" + std::to_string(r.exec_time_us) +
       " queue_wait_us=" + std::to_string(r.queue_wait_us);
  return s;
}

int c_idle_ms(const Client& c) { return c.idle_timeout_ms(); }

int g_lost_jobs = 0;  // jobs that never finished, over the whole process (exit status 3)

// Runs `count` jobs one at a time. Returns false if a job was lost (the caller stops).
bool RunSequential(Client& c, const JobKind& kind, int count, std::vector<Done>* out,
                   Measurement& m, int pace_ms = 0) {
  for (int i = 0; i < count; ++i) {
    if (pace_ms > 0) usleep(static_cast<useconds_t>(pace_ms) * 1000);
    std::string id = c.NextId("s");
    Status s = c.Submit(kind, id);
    if (!s.ok()) {
      m.note = s.message();
      m.lost += 1;
      return false;
    }
    auto d = c.NextDone();
    if (!d.ok() || !d.value()) {
      int with = 0, without = 0;
      std::string desc = c.DescribePending(&with, &without);
      m.lost += static_cast<int>(c.pending());
      m.note = (d.ok() ? "no exited event within " + std::to_string(c_idle_ms(c)) + " ms: "
                       : d.status().message() + ": ") + desc;
      c.ClearPending();
      return false;
    }
    if (out != nullptr) out->push_back(std::move(*d.value()));
  }
  return true;
}

void Latency(Client& c, const Options& o, const JobKind& kind) {
  if (g_lost_jobs > 0) {  // the daemon stopped answering earlier: nothing to measure
    Measurement m;
    m.system = "sandpool";
    m.variant = "isolated";
    m.mode = "latency";
    m.command = kind.name;
    m.template_name = kind.spec.template_name;
    m.measured = false;
    m.note = "not measured: jobs were lost earlier in this run (sandpoold stopped finishing jobs)";
    Emit(m);
    return;
  }
  Measurement m;
  m.system = "sandpool";
  m.variant = "isolated";
  m.mode = "latency";
  m.command = kind.name;
  m.template_name = kind.spec.template_name;
  std::vector<Done> warm, done;
  if (o.pace_ms > 0) {
    m.variant = "isolated-paced";
    m.extra.push_back({"pace_ms", o.pace_ms});
  }
  if (!RunSequential(c, kind, o.warmup, &warm, m, o.pace_ms) ||
      !RunSequential(c, kind, o.n, &done, m, o.pace_ms)) {
    m.note = "STOPPED: " + m.note;
  }
  Measurement b;  // breakdown
  b.system = "sandpool";
  b.variant = m.variant;
  b.mode = "breakdown";
  b.command = kind.name;
  b.template_name = kind.spec.template_name;
  std::vector<double> xadd, to_started, started_to_exited, exec, qwait, cpu, residual;
  for (const auto& d : done) {
    std::string bad = CheckResult(kind, d.result);
    if (!bad.empty()) {
      if (m.errors++ == 0) m.note += std::string(m.note.empty() ? "" : "; ") + "first error: " + d.id + ": " + bad;
    }
    m.samples_ms.push_back((d.t_exited_us - d.p.t_submit_us) / 1000.0);
    xadd.push_back((d.p.t_xadd_done_us - d.p.t_submit_us) / 1000.0);
    if (d.p.t_started_us > 0) {
      to_started.push_back((d.p.t_started_us - d.p.t_submit_us) / 1000.0);
      started_to_exited.push_back((d.t_exited_us - d.p.t_started_us) / 1000.0);
      residual.push_back((d.t_exited_us - d.p.t_started_us) / 1000.0 - d.result.exec_time_us / 1000.0);
    }
    exec.push_back(d.result.exec_time_us / 1000.0);
    qwait.push_back(d.result.queue_wait_us / 1000.0);
    cpu.push_back(d.result.cpu_time_us / 1000.0);
  }
  m.n = static_cast<int>(done.size());
  if (m.lost > 0) g_lost_jobs += m.lost;
  if (c.undecodable_events()) m.note += " undecodable events: " + std::to_string(c.undecodable_events());
  Emit(m);
  b.n = m.n;
  b.samples_ms = m.samples_ms;
  auto add = [&](const char* name, const std::vector<double>& v) {
    b.extra.push_back({std::string(name) + "_p50_ms", Percentile(v, 50)});
    b.extra.push_back({std::string(name) + "_p99_ms", Percentile(v, 99)});
  };
  add("xadd_roundtrip", xadd);
  add("submit_to_started_event", to_started);
  add("started_to_exited_event", started_to_exited);
  add("daemon_exec_time", exec);
  add("started_minus_exec_to_exited", residual);
  add("daemon_queue_wait", qwait);
  add("sandbox_cpu_time", cpu);
  b.note = "queue_wait_us is computed from the stream entry id, which has 1 ms resolution";
  Emit(b);
}

// What Redis did per job, from INFO commandstats before and after (the run is the only load on
// this Redis): calls of every command, and the daemon's round trips per job. Commands a script
// runs count in commandstats too, so the round trips are the calls only a client sends at top
// level: the daemon's scripts (EVALSHA, EVAL), its reads (XREADGROUP, XAUTOCLAIM; less the reads
// that rode along inside a FINISH call, which the daemon counts: --metrics-url) and its
// PUBLISHes outside a script; the latter are the PUBLISH calls beyond the three events (started,
// output, exited) each job's FINISH publishes when it carries them (JobLedger): an estimate that
// holds for the bench's one-line jobs. The client's own calls (XADD, the first PSUBSCRIBE,
// INFO) are left out.
// The daemon's sandpool_redis_reads_carried_total, from its /metrics (curl), or -1.
double CarriedReads(const Options& o) {
  if (o.metrics_url.empty() || o.metrics_url.find('\'') != std::string::npos) return -1;
  std::string cmd = "curl -s --max-time 2 '" + o.metrics_url + "'";
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return -1;
  double value = -1;
  char line[512];
  const char* name = "sandpool_redis_reads_carried_total ";
  while (fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, name, std::strlen(name)) == 0) value = std::strtod(line + std::strlen(name), nullptr);
  }
  pclose(f);
  return value;
}

// `carried`: the daemon's reads that rode along in a FINISH call over the run (CarriedReads; -1:
// unknown). Redis counts them as XREADGROUP calls, but they cost no round trip of their own.
void AddRedisCalls(Measurement& m, const std::map<std::string, std::pair<int64_t, int64_t>>& a,
                   const std::map<std::string, std::pair<int64_t, int64_t>>& b, int jobs, double carried) {
  if (a.empty() || b.empty()) return;
  auto delta = [&](const std::string& cmd, bool usec) -> double {
    auto ib = b.find(cmd);
    if (ib == b.end()) return 0;
    auto ia = a.find(cmd);
    int64_t before = ia == a.end() ? 0 : (usec ? ia->second.second : ia->second.first);
    return static_cast<double>((usec ? ib->second.second : ib->second.first) - before);
  };
  double nj = jobs, total_usec = 0;
  for (const auto& [cmd, v] : b) total_usec += delta(cmd, true);
  double scripts = delta("evalsha", false) + delta("eval", false);
  double publishes = delta("publish", false);
  double loose = std::max(0.0, publishes - 3 * nj);
  double reads = delta("xreadgroup", false) - std::max(0.0, carried);
  double trips = scripts + reads + delta("xautoclaim", false) + loose;
  m.extra.push_back({"redis_daemon_round_trips_per_job", trips / nj});
  m.extra.push_back({"redis_script_calls_per_job", scripts / nj});
  m.extra.push_back({"redis_xreadgroup_per_job", reads / nj});
  if (carried >= 0) m.extra.push_back({"redis_reads_carried_per_job", carried / nj});
  m.extra.push_back({"redis_publish_per_job", publishes / nj});
  m.extra.push_back({"redis_command_usec_per_job", total_usec / nj});
  // The share of each command in Redis's command time (the top ones).
  std::vector<std::pair<double, std::string>> shares;
  for (const auto& [cmd, v] : b) {
    double u = delta(cmd, true);
    if (u > 0) shares.push_back({u, cmd});
  }
  std::sort(shares.rbegin(), shares.rend());
  for (size_t i = 0; i < shares.size() && i < 6; ++i) {
    m.extra.push_back({"redis_usec_share_" + shares[i].second, total_usec > 0 ? shares[i].first / total_usec : 0});
  }
}

void Throughput(Client& c, const Options& o, const JobKind& kind, int k) {
  Measurement m;
  m.system = "sandpool";
  m.variant = o.tp_variant;
  m.mode = "throughput";
  m.command = kind.name;
  m.template_name = kind.spec.template_name;
  m.inflight = k;
  // Warm-up at the same concurrency, then the timed run.
  for (int phase = 0; phase < 2; ++phase) {
    int total = phase == 0 ? std::min(o.warmup * 2, o.tp_n) : o.tp_n;
    auto stats0 = phase == 1 ? c.CommandStats() : std::map<std::string, std::pair<int64_t, int64_t>>();
    double carried0 = phase == 1 ? CarriedReads(o) : -1;
    CpuSnap cpu0 = TakeCpu(o);
    int64_t t0 = MonotonicUs();
    int submitted = 0, completed = 0;
    int64_t t_last_done = t0;
    bool stopped = false;
    while (completed < total) {
      while (submitted < total && static_cast<int>(c.pending()) < k) {
        Status s = c.Submit(kind, c.NextId("t"));
        if (!s.ok()) {
          m.note += std::string(m.note.empty() ? "" : "; ") + "STOPPED: " + s.message();
          stopped = true;
          break;
        }
        ++submitted;
      }
      if (stopped) break;
      auto d = c.NextDone();
      if (!d.ok() || !d.value()) {
        int with = 0, without = 0;
        std::string desc = c.DescribePending(&with, &without);
        m.lost += static_cast<int>(c.pending());
        m.note += std::string(m.note.empty() ? "" : "; ") + "STOPPED: " +
                  (d.ok() ? "no exited event within " + std::to_string(o.idle_timeout_ms) +
                                " ms while jobs were pending: "
                          : d.status().message() + ": ") +
                  desc;
        c.ClearPending();
        stopped = true;
        break;
      }
      ++completed;
      t_last_done = d.value()->t_exited_us;
      if (phase == 1) {
        const Done& dd = *d.value();
        std::string bad = CheckResult(kind, dd.result);
        if (!bad.empty() && m.errors++ == 0) m.note = "first error: " + dd.id + ": " + bad;
        m.samples_ms.push_back((dd.t_exited_us - dd.p.t_submit_us) / 1000.0);
      }
    }
    // A stopped run is timed to its last completion, not through the idle timeout.
    int64_t t1 = stopped ? t_last_done : MonotonicUs();
    CpuSnap cpu1 = TakeCpu(o);
    if (phase == 1) {
      m.n = completed;
      m.wall_s = (t1 - t0) / 1e6;
      if (!stopped) AddCpu(m, o, cpu0, cpu1, completed);
      if (!stopped && completed > 0) {
        double carried1 = CarriedReads(o);
        AddRedisCalls(m, stats0, c.CommandStats(), completed, carried0 >= 0 && carried1 >= 0 ? carried1 - carried0 : -1);
      }
    }
    if (stopped) {
      if (phase == 0) m.note = "(during warm-up) " + m.note;
      break;
    }
  }
  if (m.lost > 0) g_lost_jobs += m.lost;
  Emit(m);
}

// ---------------------------------------------------------------------------------------------
// Peers: processes timed from posix_spawn to waitpid.

// The peers run with the environment a sandboxed job gets when it asks for none
// (common/job_env.h), not with this process's own: the host's variables change what a cold
// interpreter does at start (NODE_EXTRA_CA_CERTS makes every `node` parse a CA bundle, ~35 ms of
// ~70 on this machine; PYTHONUNBUFFERED splits python's writes), and a sandbox never sees them.
// run.sh runs its other peers (warm_fork.py) under the same list (--job-env).
const std::vector<std::string>& PeerEnvironment() {
  static const std::vector<std::string> env = JobEnvironment({}, {});
  return env;
}

// PeerEnvironment as posix_spawn's envp, made once (Spawn runs inside the timed loops).
char* const* PeerEnvp() {
  static const std::vector<char*> envp = [] {
    std::vector<char*> v;
    for (const auto& e : PeerEnvironment()) v.push_back(const_cast<char*>(e.c_str()));
    v.push_back(nullptr);
    return v;
  }();
  return envp.data();
}

pid_t Spawn(const std::vector<std::string>& argv, bool quiet_stderr) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  if (quiet_stderr) posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  std::vector<char*> av;
  for (const auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, av[0], &fa, nullptr, av.data(), PeerEnvp());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    errno = rc;
    return -1;
  }
  return pid;
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) {
    if (!s.empty()) s += ' ';
    s += x;
  }
  return s;
}

void PeerPerRun(const Options& o, const std::string& system, const std::string& variant,
                const std::vector<std::string>& argv, bool with_throughput = true) {
  Measurement m;
  m.system = system;
  m.variant = variant;
  m.mode = "per_run";
  m.command = Join(argv);
  if (access(argv[0].c_str(), X_OK) != 0) {
    m.measured = false;
    m.note = "not measured: " + argv[0] + " not executable";
    Emit(m);
    return;
  }
  // Probe once with stderr visible, so a failure says why.
  pid_t pid = Spawn(argv, false);
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    m.measured = false;
    m.note = "not measured: probe run failed (status " + std::to_string(st) + ")";
    Emit(m);
    return;
  }
  int warm = std::max(5, o.peer_n / 10);
  for (int i = 0; i < warm + o.peer_n; ++i) {
    int64_t t0 = MonotonicUs();
    pid = Spawn(argv, true);
    if (pid < 0 || waitpid(pid, &st, 0) < 0) {
      ++m.errors;
      continue;
    }
    int64_t t1 = MonotonicUs();
    if (i < warm) continue;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++m.errors;
    m.samples_ms.push_back((t1 - t0) / 1000.0);
  }
  m.n = static_cast<int>(m.samples_ms.size());
  Emit(m);

  if (!with_throughput || o.peer_inflight <= 1 || o.peer_tp_n <= 0) return;
  Measurement t = m;
  t.mode = "throughput";
  t.inflight = o.peer_inflight;
  t.samples_ms.clear();
  t.errors = 0;
  std::map<pid_t, int64_t> running;
  CpuSnap cpu0 = TakeCpu(o);
  int64_t children0 = ChildrenCpuUs();
  int64_t t0 = MonotonicUs();
  int started = 0, finished = 0;
  while (finished < o.peer_tp_n) {
    while (started < o.peer_tp_n && static_cast<int>(running.size()) < o.peer_inflight) {
      int64_t ts = MonotonicUs();
      pid_t p = Spawn(argv, true);
      ++started;
      if (p < 0) {
        ++t.errors;
        ++finished;
        continue;
      }
      running[p] = ts;
    }
    if (running.empty()) break;
    pid_t p = waitpid(-1, &st, 0);
    if (p < 0) break;
    auto it = running.find(p);
    if (it == running.end()) continue;
    t.samples_ms.push_back((MonotonicUs() - it->second) / 1000.0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++t.errors;
    running.erase(it);
    ++finished;
  }
  t.wall_s = (MonotonicUs() - t0) / 1e6;
  t.n = finished;
  CpuSnap cpu1 = TakeCpu(o);
  // Only host-wide and client figures are meaningful here (the children are reaped by us).
  t.extra.clear();
  double tick_ms = 1000.0 / static_cast<double>(Ticks());
  if (finished > 0) {
    // The peer's own processes (reaped by us): its CPU per job, the figure to hold sandpool's
    // daemon tree + Redis against.
    t.extra.push_back({"cpu_ms_per_job_peer", (ChildrenCpuUs() - children0) / 1000.0 / finished});
    t.extra.push_back({"cpu_ms_per_job_host_total", (cpu1.host - cpu0.host) * tick_ms / finished});
  }
  Emit(t);
}

int Main(int argc, char** argv) {
  Options o = ParseOptions(argc, argv);
  if (o.print_job_env) {
    for (const auto& e : PeerEnvironment()) std::printf("%s\n", e.c_str());
    return 0;
  }
  signal(SIGPIPE, SIG_IGN);
  bool need_redis = HasMode(o, "latency") || HasMode(o, "throughput");
  if (need_redis && o.redis.empty()) Usage("--redis is required for latency/throughput");

  if (need_redis) {
    Client c(o);
    Status s = c.Init();
    if (!s.ok()) {
      std::fprintf(stderr, "sandpool_bench: %s\n", s.message().c_str());
      return 1;
    }
    for (const auto& n : o.kinds) {
      if (!KindFor(o, n)) Usage(("unknown job kind " + n).c_str());
    }
    for (const auto& n : o.tp_kinds) {
      if (!KindFor(o, n)) Usage(("unknown job kind " + n).c_str());
    }
    if (HasMode(o, "latency")) {
      for (const auto& n : o.kinds) Latency(c, o, *KindFor(o, n));
    }
    if (HasMode(o, "throughput")) {
      for (const auto& n : o.tp_kinds) {
        JobKind kind = *KindFor(o, n);
        for (int k : o.inflight) {
          if (g_lost_jobs == 0) {
            Throughput(c, o, kind, k);
          } else {
            Measurement m;
            m.system = "sandpool";
            m.variant = "isolated";
            m.mode = "throughput";
            m.command = kind.name;
            m.template_name = kind.spec.template_name;
            m.inflight = k;
            m.measured = false;
            m.note = "not measured: jobs were lost earlier in this run (sandpoold stopped finishing jobs)";
            Emit(m);
          }
        }
      }
    }
  }
  if (HasMode(o, "peers")) {
    auto want = [&](std::string_view p) { return std::find(o.peers.begin(), o.peers.end(), p) != o.peers.end(); };
    auto variant = [&](const char* own) { return o.peer_variant.empty() ? std::string(own) : o.peer_variant; };
    if (want("bwrap")) {
      PeerPerRun(o, "bwrap", variant("unshare-all"),
                 {o.bwrap, "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "/bin/true"});
    }
    if (want("true")) PeerPerRun(o, "posix_spawn", variant("none"), {"/bin/true"});
    if (want("echo")) PeerPerRun(o, "posix_spawn", variant("none"), {"/bin/echo", "hi"});
    if (want("node") && access("/usr/bin/node", X_OK) == 0) {
      PeerPerRun(o, "node", variant("none"), {"/usr/bin/node", "-e", "console.log(1)"});
    }
    if (want("python")) PeerPerRun(o, "python3", variant("none"), {o.python, "-c", "print(1)"});
    if (want("pyimport")) {
      PeerPerRun(o, "python3", variant("none"),
                 {o.python, "-c", "import json, re, math; print(json.dumps([re.sub('a', 'b', 'a'), math.floor(2.5)]))"},
                 false);
    }
  }
  return g_lost_jobs > 0 ? 3 : 0;
}

}  // namespace
}  // namespace sandpool::bench

int main(int argc, char** argv) { return sandpool::bench::Main(argc, argv); }
