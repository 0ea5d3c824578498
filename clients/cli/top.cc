#include "clients/cli/top.h"

#include <poll.h>
#include <signal.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <msgpack.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>

#include "clients/cli/commands.h"
#include "clients/cli/output.h"
#include "common/log.h"
#include "queue/keys.h"
#include "queue/redis_sync.h"
#include "queue/redis_url.h"

namespace sandpool::cli {
namespace {

constexpr size_t kWidth = 80;

struct PoolView {
  uint64_t ready = 0, busy = 0, slots = 0, max = 0;
};

struct DaemonView {
  std::string consumer, queue;
  bool draining = false;
  bool has_recent = false;  // an older daemon's record has no `recent`, `pools`, `queue_figures`
  std::map<std::string, PoolView> pools;
  uint64_t jobs = 0, window_s = 60;
  std::map<std::string, uint64_t> outcomes;
  std::optional<uint64_t> start_p50, start_p99, run_p50, run_p99;
  std::optional<uint64_t> pending, lag, oldest_ms;
};

struct FleetView {
  std::string error;  // Redis unreachable (or refusing): why
  uint64_t queued = 0;  // XLEN of the queue: entries queued or running
  std::vector<DaemonView> daemons;  // of every queue, sorted by consumer
  int64_t now_ms = 0;
};

int64_t NowMs() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1000000;
}

std::string Str(const msgpack::object& o) {
  if (o.type == msgpack::type::STR) return std::string(o.via.str.ptr, o.via.str.size);
  if (o.type == msgpack::type::BIN) return std::string(o.via.bin.ptr, o.via.bin.size);
  return {};
}

std::optional<uint64_t> Uint(const msgpack::object& o) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) return o.via.u64;
  return std::nullopt;
}

template <typename F>
void ForEach(const msgpack::object& map, F f) {
  if (map.type != msgpack::type::MAP) return;
  for (uint32_t i = 0; i < map.via.map.size; ++i) f(Str(map.via.map.ptr[i].key), map.via.map.ptr[i].val);
}

std::optional<DaemonView> DecodeRecord(std::string_view bytes) {
  try {
    msgpack::object_handle h = msgpack::unpack(bytes.data(), bytes.size());
    const msgpack::object& m = h.get();
    if (m.type != msgpack::type::MAP) return std::nullopt;
    DaemonView d;
    ForEach(m, [&d](const std::string& k, const msgpack::object& v) {
      if (k == "consumer") d.consumer = Str(v);
      if (k == "queue") d.queue = Str(v);
      if (k == "draining" && v.type == msgpack::type::BOOLEAN) d.draining = v.via.boolean;
      if (k == "pools") {
        ForEach(v, [&d](const std::string& t, const msgpack::object& p) {
          PoolView& pv = d.pools[t];
          ForEach(p, [&pv](const std::string& f, const msgpack::object& n) {
            uint64_t x = Uint(n).value_or(0);
            if (f == "ready") pv.ready = x;
            if (f == "busy") pv.busy = x;
            if (f == "slots") pv.slots = x;
            if (f == "max") pv.max = x;
          });
        });
      }
      if (k == "queue_figures") {
        ForEach(v, [&d](const std::string& f, const msgpack::object& n) {
          if (f == "pending") d.pending = Uint(n);
          if (f == "lag") d.lag = Uint(n);
          if (f == "oldest_ms") d.oldest_ms = Uint(n);
        });
      }
      if (k == "recent") {
        d.has_recent = true;
        ForEach(v, [&d](const std::string& f, const msgpack::object& n) {
          if (f == "jobs") d.jobs = Uint(n).value_or(0);
          if (f == "window_s") d.window_s = std::max<uint64_t>(1, Uint(n).value_or(60));
          if (f == "start_p50_ms") d.start_p50 = Uint(n);
          if (f == "start_p99_ms") d.start_p99 = Uint(n);
          if (f == "run_p50_ms") d.run_p50 = Uint(n);
          if (f == "run_p99_ms") d.run_p99 = Uint(n);
          if (f == "outcomes") {
            ForEach(n, [&d](const std::string& o, const msgpack::object& c) { d.outcomes[o] = Uint(c).value_or(0); });
          }
        });
      }
    });
    return d;
  } catch (const std::exception&) {
    return std::nullopt;  // not a record we understand: shown as nothing
  }
}

// Reads everything the view shows. A Redis failure closes the connection (reconnected next time)
// and is reported in the view.
FleetView Read(std::unique_ptr<SyncRedis>* redis, const RedisUrl& url, const Keys& keys, const std::string& queue) {
  FleetView v;
  v.now_ms = NowMs();
  if (!*redis) {
    auto c = SyncRedis::Connect(url, 1000);
    if (!c.ok()) {
      v.error = c.status().message();
      return v;
    }
    *redis = std::move(c.value());
  }
  auto fail = [&](const Status& s) {
    v.error = s.message();
    redis->reset();
    return v;
  };
  auto len = (*redis)->Command({"XLEN", keys.Queue(queue)});
  if (!len.ok()) return fail(len.status());
  v.queued = len.value()->type == REDIS_REPLY_INTEGER ? static_cast<uint64_t>(len.value()->integer) : 0;
  std::string cursor = "0";
  std::vector<std::string> names;
  do {
    auto scan = (*redis)->Command({"SCAN", cursor, "MATCH", keys.Daemon("*"), "COUNT", "1000"});
    if (!scan.ok()) return fail(scan.status());
    const redisReply* s = scan.value().get();
    if (s->type != REDIS_REPLY_ARRAY || s->elements != 2) return fail(Status::Error("SCAN: unexpected reply"));
    cursor = std::string(s->element[0]->str, s->element[0]->len);
    for (size_t i = 0; i < s->element[1]->elements; ++i) {
      names.emplace_back(s->element[1]->element[i]->str, s->element[1]->element[i]->len);
    }
  } while (cursor != "0");
  for (const std::string& key : names) {
    auto rec = (*redis)->Command({"GET", key});
    if (!rec.ok()) return fail(rec.status());
    if (rec.value()->type != REDIS_REPLY_STRING) continue;  // expired meanwhile
    if (auto d = DecodeRecord(std::string_view(rec.value()->str, rec.value()->len))) v.daemons.push_back(std::move(*d));
  }
  std::sort(v.daemons.begin(), v.daemons.end(), [](const DaemonView& a, const DaemonView& b) { return a.consumer < b.consumer; });
  return v;
}

// The queue's figures: every daemon of the queue reports the same ones (read at its previous
// heartbeat, so all within a heartbeat of each other): the first daemon of the queue's are shown.
const DaemonView* QueueSource(const FleetView& v, const std::string& queue) {
  for (const DaemonView& d : v.daemons) {
    if (d.queue == queue && d.pending) return &d;
  }
  return nullptr;
}

std::string Fixed(double x, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

std::string Ms(const std::optional<uint64_t>& ms) {
  if (!ms) return "-";
  if (*ms < 1000) return std::to_string(*ms) + "ms";
  if (*ms < 60000) return Fixed(static_cast<double>(*ms) / 1000.0, 1) + "s";
  return std::to_string(*ms / 60000) + "m";
}

std::string Age(int64_t now_ms, uint64_t oldest_ms) {
  if (oldest_ms == 0) return "none";
  int64_t age = now_ms - static_cast<int64_t>(oldest_ms);
  return Ms(static_cast<uint64_t>(std::max<int64_t>(0, age)));
}

std::string Pad(std::string s, size_t w, bool right = false) {
  if (s.size() > w) s = s.substr(0, w);
  std::string pad(w - s.size(), ' ');
  return right ? pad + s : s + pad;
}

std::map<std::string, uint64_t> Failures(const FleetView& v) {
  std::map<std::string, uint64_t> out;
  for (const DaemonView& d : v.daemons) {
    for (const auto& [o, n] : d.outcomes) {
      if (o != "exit" && n > 0) out[o] += n;  // a user's own exit code is not a failure of the pool
    }
  }
  return out;
}

// The view in lines of at most kWidth columns. `live`: top keeps refreshing (and says so).
std::vector<std::string> Render(const FleetView& v, const std::string& redis, const std::string& queue, bool live) {
  std::vector<std::string> lines;
  char clock[16];
  time_t secs = static_cast<time_t>(v.now_ms / 1000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  std::strftime(clock, sizeof clock, "%H:%M:%S", &tm);
  std::string head = "sandpool top  queue " + queue + "  redis " + redis;
  lines.push_back(Pad(head, kWidth - 13) + Pad(std::string(clock) + " UTC", 13, true));
  // Everything below is cut to kWidth where it is printed (Screen::Draw, and --once).
  if (!v.error.empty()) {
    lines.push_back("");
    lines.push_back("Redis unreachable: " + v.error);
    if (live) lines.push_back("retrying at every refresh");
    return lines;
  }
  const DaemonView* qs = QueueSource(v, queue);
  std::string q = "queue: " + std::to_string(v.queued) + " queued or running";
  if (qs) {
    q += "  lag " + std::to_string(*qs->lag) + "  pending " + std::to_string(*qs->pending) + "  oldest waiting " +
         Age(v.now_ms, qs->oldest_ms.value_or(0));
  }
  lines.push_back(q);
  double rate = 0;
  for (const DaemonView& d : v.daemons) rate += static_cast<double>(d.jobs) / static_cast<double>(d.window_s);
  lines.push_back("fleet: " + std::to_string(v.daemons.size()) + " daemon" + (v.daemons.size() == 1 ? "" : "s") +
                  " alive  jobs/s " + Fixed(rate, 2) + " (last minute)");
  std::string f = "recent failures:";
  auto failures = Failures(v);
  if (failures.empty()) f += " none";
  for (const auto& [o, n] : failures) f += " " + o + " " + std::to_string(n);
  lines.push_back(f);
  lines.push_back("");
  if (v.daemons.empty()) {
    lines.push_back(std::string("no daemon alive: no heartbeat record in Redis") + (live ? " (waiting for one)" : ""));
    return lines;
  }
  // DAEMON 18, TEMPLATE 12, READY 5, BUSY 5, MAX 4, JOBS/S 7, START p50 7, p99 7, RUN p99 7 = 80
  lines.push_back("DAEMON             TEMPLATE     READY BUSY  MAX JOBS/S START50 START99   RUN99");
  for (const DaemonView& d : v.daemons) {
    bool first = true;
    std::string name = d.consumer + (d.draining ? " (drain)" : "");
    if (d.pools.empty()) {
      lines.push_back(Pad(name, 18) + " (an older daemon: no figures per template)");
      continue;
    }
    for (const auto& [t, p] : d.pools) {
      std::string line = Pad(first ? name : "", 18) + " " + Pad(t, 12) + Pad(std::to_string(p.ready), 6, true) +
                         Pad(std::to_string(p.busy), 5, true) + Pad(std::to_string(p.max), 5, true);
      if (first) {
        line += Pad(Fixed(static_cast<double>(d.jobs) / static_cast<double>(d.window_s), 2), 7, true) +
                Pad(Ms(d.start_p50), 8, true) + Pad(Ms(d.start_p99), 8, true) + Pad(Ms(d.run_p99), 8, true);
      }
      lines.push_back(line);
      first = false;
    }
  }
  return lines;
}

void JsonUint(std::string& out, const char* key, const std::optional<uint64_t>& v) {
  out += '"';
  out += key;
  out += "\":";
  out += v ? std::to_string(*v) : "null";
}

std::string ToJson(const FleetView& v, const std::string& queue) {
  std::string o = "{\"time_ms\":" + std::to_string(v.now_ms) + ",\"redis_error\":";
  if (v.error.empty()) {
    o += "null";
  } else {
    AppendJsonString(o, v.error);
  }
  o += ",\"queue\":{\"name\":";
  AppendJsonString(o, queue);
  o += ",\"queued\":" + std::to_string(v.queued);
  const DaemonView* qs = QueueSource(v, queue);
  o += ",";
  JsonUint(o, "lag", qs ? qs->lag : std::nullopt);
  o += ",";
  JsonUint(o, "pending", qs ? qs->pending : std::nullopt);
  o += ",\"oldest_waiting_ms\":";
  if (qs && qs->oldest_ms && *qs->oldest_ms > 0) {
    o += std::to_string(std::max<int64_t>(0, v.now_ms - static_cast<int64_t>(*qs->oldest_ms)));
  } else {
    o += qs ? "0" : "null";
  }
  o += "},\"failures\":{";
  bool first = true;
  for (const auto& [k, n] : Failures(v)) {
    if (!first) o += ',';
    first = false;
    AppendJsonString(o, k);
    o += ':' + std::to_string(n);
  }
  o += "},\"daemons\":[";
  for (size_t i = 0; i < v.daemons.size(); ++i) {
    const DaemonView& d = v.daemons[i];
    if (i) o += ',';
    o += "{\"consumer\":";
    AppendJsonString(o, d.consumer);
    o += ",\"queue\":";
    AppendJsonString(o, d.queue);
    o += std::string(",\"draining\":") + (d.draining ? "true" : "false");
    o += ",\"jobs_per_s\":" + Fixed(static_cast<double>(d.jobs) / static_cast<double>(d.window_s), 3);
    o += ",\"jobs\":" + std::to_string(d.jobs) + ",\"window_s\":" + std::to_string(d.window_s) + ",";
    JsonUint(o, "start_p50_ms", d.start_p50);
    o += ",";
    JsonUint(o, "start_p99_ms", d.start_p99);
    o += ",";
    JsonUint(o, "run_p50_ms", d.run_p50);
    o += ",";
    JsonUint(o, "run_p99_ms", d.run_p99);
    o += ",\"outcomes\":{";
    bool f2 = true;
    for (const auto& [k, n] : d.outcomes) {
      if (!f2) o += ',';
      f2 = false;
      AppendJsonString(o, k);
      o += ':' + std::to_string(n);
    }
    o += "},\"pools\":{";
    bool f3 = true;
    for (const auto& [t, p] : d.pools) {
      if (!f3) o += ',';
      f3 = false;
      AppendJsonString(o, t);
      o += ":{\"ready\":" + std::to_string(p.ready) + ",\"busy\":" + std::to_string(p.busy) +
           ",\"slots\":" + std::to_string(p.slots) + ",\"max\":" + std::to_string(p.max) + "}";
    }
    o += "}}";
  }
  return o + "]}";
}

std::atomic<bool> g_stop{false};
void OnStopSignal(int) { g_stop = true; }

// The terminal in the state top needs (no line buffering, no echo; Ctrl-C still signals), and
// the alternate screen; everything restored by the destructor.
class Screen {
 public:
  Screen() {
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_) == 0) {
      struct termios raw = saved_;
      raw.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO));
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      restore_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    (void)WriteFd(STDOUT_FILENO, "\x1b[?1049h\x1b[?25l");
  }
  ~Screen() {
    (void)WriteFd(STDOUT_FILENO, "\x1b[?25h\x1b[?1049l");
    if (restore_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;

  void Draw(const std::vector<std::string>& lines) {
    std::string frame = "\x1b[H";
    for (const std::string& l : lines) frame += l.substr(0, kWidth) + "\x1b[K\r\n";
    frame += "\x1b[J";
    (void)WriteFd(STDOUT_FILENO, frame);
  }

 private:
  struct termios saved_ {};
  bool restore_ = false;
};

// Waits up to `ms` for a key; true when it was q (or stdin closed).
bool WaitForQuit(int ms) {
  struct pollfd p = {STDIN_FILENO, POLLIN, 0};
  int n = poll(&p, 1, ms);
  if (n <= 0) return false;  // timeout, or a signal (g_stop says which)
  char c;
  ssize_t r = read(STDIN_FILENO, &c, 1);
  if (r == 0) {
    // stdin at its end (not a terminal): keep refreshing on the timer alone.
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, nullptr);
    return false;
  }
  return r == 1 && (c == 'q' || c == 'Q');
}

}  // namespace

int TopCommand(const std::vector<std::string>& args, GlobalOptions g) {
  bool once = false, json = false;
  double interval = 1.0;
  for (size_t i = 0; i < args.size(); ++i) {
    auto global = ConsumeGlobalOption(args, &i, &g);
    if (!global.ok()) {
      PrintError(global.status().message());
      return kExitUsage;
    }
    if (global.value()) continue;
    if (args[i] == "--once") {
      once = true;
    } else if (args[i] == "--json") {
      json = true;
    } else if (args[i] == "--interval" && i + 1 < args.size()) {
      char* end = nullptr;
      interval = std::strtod(args[++i].c_str(), &end);
      if (*end != '\0' || !(interval >= 0.1 && interval <= 3600)) {
        PrintError("--interval: seconds between 0.1 and 3600");
        return kExitUsage;
      }
    } else if (args[i] == "--help" || args[i] == "-h") {
      (void)WriteFd(STDOUT_FILENO,
                    "usage: sandpool top [--once [--json]] [--interval SECONDS]\n"
                    "A live view of the fleet from Redis: daemons, slots per template, jobs/s and latency over the\n"
                    "last minute, the queue's length, lag, pending and oldest waiting job, recent failures.\n"
                    "q or Ctrl-C quits. --once prints one view (--json: as JSON) and exits.\n");
      return 0;
    } else {
      PrintError("top: unknown argument '" + args[i] + "'; see 'sandpool top --help'");
      return kExitUsage;
    }
  }
  if (json && !once) {
    PrintError("top: --json needs --once");
    return kExitUsage;
  }
  auto url = ParseRedisUrl(g.redis_url);
  if (!url.ok()) {
    PrintError(url.status().message());
    return kExitUsage;
  }
  Keys keys(g.prefix);
  std::unique_ptr<SyncRedis> redis;
  std::string shown = url.value().Redacted();
  if (once) {
    FleetView v = Read(&redis, url.value(), keys, g.queue);
    std::string out;
    if (json) {
      out = ToJson(v, g.queue) + "\n";
    } else {
      for (const std::string& l : Render(v, shown, g.queue, false)) out += l.substr(0, kWidth) + "\n";
    }
    (void)WriteFd(STDOUT_FILENO, out);
    return v.error.empty() ? 0 : kExitFailure;
  }
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: poll returns at once
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  Screen screen;
  while (!g_stop) {
    FleetView v = Read(&redis, url.value(), keys, g.queue);
    std::vector<std::string> lines = Render(v, shown, g.queue, true);
    lines.push_back("");
    lines.push_back("q quits");
    screen.Draw(lines);
    if (WaitForQuit(static_cast<int>(interval * 1000))) break;
  }
  return 0;
}

}  // namespace sandpool::cli
