#include "scheduler/config/config.h"

#include "common/egress_rules.h"
#include "common/job_env.h"
#include "common/runtimes.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <functional>
#include <map>
#include <sstream>

namespace sandpool {
namespace {

struct Option {
  const char* name;
  const char* help;
  std::function<Status(DaemonConfig*, const std::string&)> set;
  bool is_flag = false;  // takes no value (--name means "true")
};

Result<uint64_t> ParseUint(const std::string& s) {
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return Status::Error("not a number: '" + s + "'");
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  // The whole string (a config file line may hold a NUL: "1\0junk" is not 1).
  if (errno != 0 || end != s.c_str() + s.size()) return Status::Error("not a number: '" + s + "'");
  return static_cast<uint64_t>(v);
}

Status ParseBool(const std::string& s, bool* out) {
  if (s == "1" || s == "true" || s == "yes" || s == "on") *out = true;
  else if (s == "0" || s == "false" || s == "no" || s == "off") *out = false;
  else return Status::Error("not a boolean: '" + s + "'");
  return Status::Ok();
}

template <typename T>
std::function<Status(DaemonConfig*, const std::string&)> Uint(T DaemonConfig::*field) {
  return [field](DaemonConfig* c, const std::string& v) {
    auto n = ParseUint(v);
    if (!n.ok()) return n.status();
    if (*n > std::numeric_limits<T>::max()) return Status::Error("too large: '" + v + "'");
    c->*field = static_cast<T>(*n);
    return Status::Ok();
  };
}

std::function<Status(DaemonConfig*, const std::string&)> Size(uint64_t* (*get)(DaemonConfig*)) {
  return [get](DaemonConfig* c, const std::string& v) {
    auto n = ParseSize(v);
    if (!n.ok()) return n.status();
    *get(c) = *n;
    return Status::Ok();
  };
}

// Space-separated IPv4 ranges, as egress rules write them.
Status ParseRanges(const std::string& v, const char* option, std::vector<Cidr>* out) {
  std::istringstream words(v);
  out->clear();
  for (std::string w; words >> w;) {
    auto r = ParseEgressRule(w);
    if (!r.ok() || r->kind != EgressRule::Kind::kCidr || !r->ports.empty()) {
      return Status::Error(std::string(option) + ": '" + w + "' is not an IPv4 range");
    }
    out->push_back(r->cidr);
  }
  return Status::Ok();
}

Status SetRange(const std::string& v, uint64_t lo, uint64_t hi, uint32_t* out) {
  auto n = ParseUint(v);
  if (!n.ok()) return n.status();
  if (*n < lo || *n > hi) return Status::Error("must be in " + std::to_string(lo) + ".." + std::to_string(hi));
  *out = static_cast<uint32_t>(*n);
  return Status::Ok();
}

// "0.5" CPUs -> a CFS quota of half the period.
Status SetCpus(const std::string& v, CgroupLimits* limits) {
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || end != v.c_str() + v.size() || !(d > 0.0) || d > 1024) return Status::Error("cpus must be a positive number");
  // The kernel's smallest CFS quota is 1 ms per period.
  if (d * static_cast<double>(limits->cpu_period_us) < 1000.0) return Status::Error("cpus too small: the quota must be at least 1 ms per period");
  limits->cpu_quota_us = static_cast<uint64_t>(std::llround(d * static_cast<double>(limits->cpu_period_us)));
  return Status::Ok();
}

std::function<Status(DaemonConfig*, const std::string&)> Num(uint64_t* (*get)(DaemonConfig*)) {
  return [get](DaemonConfig* c, const std::string& v) {
    auto n = ParseUint(v);
    if (!n.ok()) return n.status();
    *get(c) = *n;
    return Status::Ok();
  };
}

std::function<Status(DaemonConfig*, const std::string&)> Str(std::string DaemonConfig::*field) {
  return [field](DaemonConfig* c, const std::string& v) {
    c->*field = v;
    return Status::Ok();
  };
}

const std::vector<Option>& Options() {
  static const std::vector<Option> opts = {
      {"redis", "Redis URL: redis://[user:password@]host:port[/db] or unix:///path (env SANDPOOL_REDIS_URL)", Str(&DaemonConfig::redis_url)},
      {"metrics-addr", "HOST:PORT for /metrics, /livez, /readyz; 'off' to disable", Str(&DaemonConfig::metrics_addr)},
      {"workers", "number of pool slots (sandboxes kept ready / jobs run at once)", Uint(&DaemonConfig::workers)},
      {"queue", "queue name (stream <prefix>:q:<queue>)", Str(&DaemonConfig::queue)},
      {"consumer", "this daemon's stable consumer name (default: host name)", Str(&DaemonConfig::consumer)},
      {"prefix", "Redis key prefix", Str(&DaemonConfig::prefix)},
      {"log-level", "debug, info, warn or error",
       [](DaemonConfig* c, const std::string& v) {
         return ParseLogLevel(v, &c->log_level) ? Status::Ok() : Status::Error("unknown log level '" + v + "'");
       }},
      {"cpu-policy", "batch (default) or other: the CPU scheduling policy of the daemon and all it starts (keepers, "
                     "sandboxes); batch: a woken process waits for the running one's turn instead of preempting it",
       [](DaemonConfig* c, const std::string& v) {
         if (v != "batch" && v != "other") return Status::Error("--cpu-policy must be batch or other");
         c->cpu_batch = v == "batch";
         return Status::Ok();
       }},
      {"result-ttl", "seconds results and job records are kept", Uint(&DaemonConfig::result_ttl_s)},
      {"grace-ms", "on SIGTERM, how long running jobs may finish before they are killed", Uint(&DaemonConfig::grace_ms)},
      {"heartbeat-ms", "heartbeat and lease-refresh interval", Uint(&DaemonConfig::heartbeat_ms)},
      {"lease-ms", "pending entries idle this long are reclaimed from dead daemons", Uint(&DaemonConfig::lease_ms)},
      {"max-payload-bytes", "largest stream entry accepted", Size(+[](DaemonConfig* c) { return &c->max_payload_bytes; })},
      {"default-timeout-ms", "wall timeout of a job that names none", Num(+[](DaemonConfig* c) { return &c->limits.default_timeout_ms; })},
      {"max-timeout-ms", "largest wall timeout a job may ask for (larger ones are clamped)", Num(+[](DaemonConfig* c) { return &c->limits.max_timeout_ms; })},
      {"default-output-bytes", "output kept per stream when the job names no limit", Size(+[](DaemonConfig* c) { return &c->limits.default_output_bytes; })},
      {"max-output-bytes", "largest per-stream output limit a job may ask for", Size(+[](DaemonConfig* c) { return &c->limits.max_output_bytes; })},
      {"cgroup", "cgroup hierarchy: auto, v1 or v2", Str(&DaemonConfig::cgroup_mode)},
      {"allow-missing-controllers", "v2 only, for tests: run even if memory/pids/cpu controllers cannot be enabled",
       [](DaemonConfig* c, const std::string& v) { return ParseBool(v, &c->allow_missing_controllers); }, true},
      {"uid-base", "first host uid/gid for sandboxes (2 per slot; never 0)",
       [](DaemonConfig* c, const std::string& v) {
         auto n = ParseUint(v);
         if (!n.ok()) return n.status();
         if (*n == 0 || *n > 4000000000ull) return Status::Error("uid-base must be in 1..4000000000");
         c->sandbox.host_id_base = static_cast<uint32_t>(*n);
         return Status::Ok();
       }},
      {"memory", "memory limit per sandbox", Size(+[](DaemonConfig* c) { return &c->sandbox.cgroup.memory_bytes; })},
      {"pids", "process/thread limit per sandbox", Num(+[](DaemonConfig* c) { return &c->sandbox.cgroup.pids; })},
      {"cpus", "CPU quota per sandbox, in CPUs (e.g. 0.5)",
       [](DaemonConfig* c, const std::string& v) { return SetCpus(v, &c->sandbox.cgroup); }},
      {"max-memory", "largest memory limit a job may ask for (default: --memory)", Size(+[](DaemonConfig* c) { return &c->limits.max_memory_bytes; })},
      {"max-pids", "largest pids limit a job may ask for (default: --pids)", Num(+[](DaemonConfig* c) { return &c->limits.max_pids; })},
      {"max-cpu-time-ms", "largest CPU-time limit a job may ask for", Num(+[](DaemonConfig* c) { return &c->limits.max_cpu_time_ms; })},
      {"cpu-time-ms", "CPU-time limit per job (0: none)", Num(+[](DaemonConfig* c) { return &c->sandbox.cpu_time_ms; })},
      {"work-size", "size of the writable /work per sandbox", Size(+[](DaemonConfig* c) { return &c->sandbox.work_bytes; })},
      {"tmp-size", "size of /tmp (and of /var/tmp) per sandbox", Size(+[](DaemonConfig* c) { return &c->sandbox.tmp_bytes; })},
      {"max-workers", "most slots demand may grow the default template's pool to (default: max(workers, 16))", Uint(&DaemonConfig::max_workers)},
      {"python-workers", "warm python sandboxes kept (template 'python'; 0: no such template)", Uint(&DaemonConfig::python_workers)},
      {"python-max-workers", "most slots of template 'python'", Uint(&DaemonConfig::python_max_workers)},
      {"node-workers", "warm node sandboxes kept (template 'node'; 0: no such template)", Uint(&DaemonConfig::node_workers)},
      {"node-max-workers", "most slots of template 'node'", Uint(&DaemonConfig::node_max_workers)},
      {"max-sandboxes", "host-wide limit on pool slots across templates", Uint(&DaemonConfig::max_sandboxes)},
      {"memory-budget", "host-wide limit on the sum of the slots' memory limits (default 3/4 of RAM)", Size(+[](DaemonConfig* c) { return &c->memory_budget_bytes; })},
      {"state-dir", "where template layers and session disks are kept", Str(&DaemonConfig::state_dir)},
      {"session-disk", "disk of a session that names no size", Size(+[](DaemonConfig* c) { return &c->session_disk_bytes; })},
      {"max-session-disk", "largest disk a session may ask for", Size(+[](DaemonConfig* c) { return &c->max_session_disk_bytes; })},
      {"max-snapshot-bytes", "largest snapshot (its data; stored in Redis for other hosts)",
       Size(+[](DaemonConfig* c) { return &c->max_snapshot_bytes; })},
      {"session-spares", "warm session sandboxes kept per template once it has had a session (0 or 1)",
       Uint(&DaemonConfig::session_spares)},
      {"net", "on: templates may have egress policies (veth per slot, nftables; docs/design/network.md)",
       [](DaemonConfig* c, const std::string& v) { return ParseBool(v, &c->net.on); }},
      {"net-pool", "IPv4 range for the network slots' links, two addresses per slot (must be unused on the host)",
       [](DaemonConfig* c, const std::string& v) {
         auto r = ParseEgressRule(v);
         if (!r.ok() || r->kind != EgressRule::Kind::kCidr || !r->ports.empty()) {
           return Status::Error("--net-pool must be an IPv4 range such as 10.200.0.0/16");
         }
         c->net.pool = r->cidr;
         return Status::Ok();
       }},
      {"net-ip-forward", "require (refuse to start network templates while net.ipv4.ip_forward is 0) or set (turn it on)",
       [](DaemonConfig* c, const std::string& v) {
         if (v != "require" && v != "set") return Status::Error("--net-ip-forward must be require or set");
         c->net.set_ip_forward = v == "set";
         return Status::Ok();
       }},
      {"net-connections", "concurrent connections per network sandbox",
       [](DaemonConfig* c, const std::string& v) { return SetRange(v, 1, 65536, &c->net.connections); }},
      {"net-new-connections", "new connections per second per network sandbox (bursts of twice that)",
       [](DaemonConfig* c, const std::string& v) { return SetRange(v, 1, 100000, &c->net.new_connections); }},
      {"net-allow-private", "IPv4 ranges (space-separated) taken out of the always-refused ones (private, link-local ...), "
                            "so that templates' policies may allow them; never the host's own addresses or other sandboxes",
       [](DaemonConfig* c, const std::string& v) { return ParseRanges(v, "--net-allow-private", &c->net.allow_private); }},
      {"net-refuse", "more IPv4 ranges (space-separated) no policy may reach: addresses that lead back to this host "
                     "without being on it (a cloud's 1:1 NAT public address), internal services",
       [](DaemonConfig* c, const std::string& v) { return ParseRanges(v, "--net-refuse", &c->net.refuse); }},
      {"net-rate", "bandwidth of each network sandbox, each direction, bytes/s (suffixes k, M, G; 0: unlimited)",
       Size(+[](DaemonConfig* c) { return &c->net.rate_bytes; })},
      {"net-dns-upstream", "resolvers (IPv4[@port], space-separated) that sandboxes' allowed names are forwarded to (default: the host's /etc/resolv.conf)",
       [](DaemonConfig* c, const std::string& v) { c->net.dns_upstream = v; return Status::Ok(); }},
      {"net-dns-ttl-min", "seconds an address resolved for an allowed name stays open, at least (answers' TTLs are clamped)",
       [](DaemonConfig* c, const std::string& v) { return SetRange(v, 1, 86400, &c->net.dns_ttl_min); }},
      {"net-dns-ttl-max", "... and at most",
       [](DaemonConfig* c, const std::string& v) { return SetRange(v, 1, 86400, &c->net.dns_ttl_max); }},
      {"net-dns-qps", "DNS questions per second per network sandbox (bursts of twice that)",
       [](DaemonConfig* c, const std::string& v) { return SetRange(v, 1, 100000, &c->net.dns_qps); }},
      {"net-preview-listen", "address:port of the preview proxy (sessions' exposed ports; 'off': none)",
       [](DaemonConfig* c, const std::string& v) { c->net.preview_listen = v; return Status::Ok(); }},
      {"net-expose-ports", "host ports exposed session ports get (LO-HI, e.g. 40000-40999; default off: a host port "
                           "takes anyone's connections without a token, whatever the session's egress policy)",
       [](DaemonConfig* c, const std::string& v) {
         if (v == "off") {
           c->net.host_port_lo = c->net.host_port_hi = 0;
           return Status::Ok();
         }
         size_t dash = v.find('-');
         auto lo = ParseUint(v.substr(0, dash)), hi = ParseUint(dash == std::string::npos ? "" : v.substr(dash + 1));
         if (!lo.ok() || !hi.ok() || *lo < 1 || *lo > *hi || *hi > 65535) return Status::Error("--net-expose-ports must be LO-HI or off");
         c->net.host_port_lo = static_cast<uint16_t>(*lo);
         c->net.host_port_hi = static_cast<uint16_t>(*hi);
         return Status::Ok();
       }},
      {"net-preview-url", "base of preview URLs, '{port}' standing for the proxy's port (default http://<host name>:{port}/)",
       [](DaemonConfig* c, const std::string& v) { c->net.preview_url = v; return Status::Ok(); }},
      {"session-idle-timeout-ms", "a session nothing used this long is stopped, unless it names its own (0: never)",
       Num(+[](DaemonConfig* c) { return &c->session_idle_timeout_ms; })},
      {"setup-timeout-ms", "how long a template's setup may take at start-up", Num(+[](DaemonConfig* c) { return &c->setup_timeout_ms; })},
      {"open-files", "RLIMIT_NOFILE per job", Num(+[](DaemonConfig* c) { return &c->sandbox.open_files; })},
      {"file-size", "largest file a job may write (RLIMIT_FSIZE)", Size(+[](DaemonConfig* c) { return &c->sandbox.file_size_bytes; })},
  };
  return opts;
}

std::string EnvName(const char* option) {
  std::string s = "SANDPOOL_";
  for (const char* p = option; *p; ++p) s += *p == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(*p)));
  return s;
}

const Option* Find(const std::string& name) {
  for (const Option& o : Options()) {
    if (name == o.name) return &o;
  }
  return nullptr;
}

void PrintHelp() {
  std::printf(
      "usage: sandpoold [options]\n\n"
      "Runs jobs from Redis in prewarmed, isolated sandboxes (needs root). Every option can also\n"
      "be set as SANDPOOL_<NAME> in the environment or as 'name = value' in a --config file.\n\n"
      "  --config FILE  read options from FILE (env SANDPOOL_CONFIG)\n"
      "  --help         this text\n");
  for (const Option& o : Options()) {
    std::printf("  --%-26s %s\n", (std::string(o.name) + (o.is_flag ? "" : " V")).c_str(), o.help);
  }
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  size_t e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

int FindTemplate(const DaemonConfig& c, const std::string& name) {
  for (size_t i = 0; i < c.templates.size(); ++i) {
    if (c.templates[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

Status ApplyTemplateKey(TemplateConfig* t, const std::string& key, const std::string& value) {
  auto num = [&](uint64_t* out) -> Status {
    auto n = ParseUint(value);
    if (!n.ok()) return n.status();
    *out = *n;
    return Status::Ok();
  };
  auto size = [&](uint64_t* out) -> Status {
    auto n = ParseSize(value);
    if (!n.ok()) return n.status();
    *out = *n;
    return Status::Ok();
  };
  uint64_t n = 0;
  if (key == "runtime") {
    if (value != "none" && FindRuntime(value) == nullptr) {
      std::string names = "none";
      for (const RuntimeInfo& r : kRuntimes) names += ", " + std::string(r.name);
      return Status::Error("runtime must be one of " + names);
    }
    t->sandbox.runtime = value == "none" ? "" : value;
  } else if (key == "workers" || key == "max-workers") {
    SP_RETURN_IF_ERROR(num(&n));
    if (n > 100000) return Status::Error(key + ": at most 100000");
    (key == "workers" ? t->min_workers : t->max_workers) = static_cast<uint32_t>(n);
  } else if (key == "memory") {
    SP_RETURN_IF_ERROR(size(&t->sandbox.cgroup.memory_bytes));
  } else if (key == "pids") {
    SP_RETURN_IF_ERROR(num(&t->sandbox.cgroup.pids));
  } else if (key == "cpus") {
    SP_RETURN_IF_ERROR(SetCpus(value, &t->sandbox.cgroup));
  } else if (key == "cpu-time-ms") {
    SP_RETURN_IF_ERROR(num(&t->sandbox.cpu_time_ms));
  } else if (key == "work-size") {
    SP_RETURN_IF_ERROR(size(&t->sandbox.work_bytes));
  } else if (key == "tmp-size") {
    SP_RETURN_IF_ERROR(size(&t->sandbox.tmp_bytes));
  } else if (key == "env") {
    size_t eq = value.find('=');
    if (eq == std::string::npos || eq == 0) return Status::Error("env must be NAME=value");
    t->env.push_back(value);
  } else if (key == "setup") {
    t->setup.push_back(value);
  } else if (key == "layer") {
    if (value.size() < 2 || value[0] != '/' || value.find("..") != std::string::npos || value == "/work" ||
        value == "/tmp" || value == "/proc" || value == "/dev" || value == "/etc" || value == "/usr") {
      return Status::Error("layer must be an absolute path outside /usr /etc /dev /proc /work /tmp (e.g. /opt)");
    }
    t->sandbox.layer_mount = value;
  } else if (key == "root") {
    struct stat st;
    if (value.size() < 2 || value[0] != '/' || value.find("..") != std::string::npos) {
      return Status::Error("root must be an absolute host path (a prepared root directory)");
    }
    if (::stat(value.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return Status::Error("root " + value + " is not a directory");
    t->sandbox.root_dir = value;
  } else if (key == "upper-size") {
    SP_RETURN_IF_ERROR(size(&t->sandbox.upper_bytes));
  } else if (key == "egress" || key == "egress-deny") {
    std::istringstream words(value);
    std::vector<std::string> texts;
    for (std::string w; words >> w;) texts.push_back(w);
    auto rules = ParseEgressRules(texts, key);
    if (!rules.ok()) return rules.status();
    if (rules->empty()) return Status::Error("needs at least one rule (no egress key: no network)");
    auto& list = key == "egress" ? t->egress.allow : t->egress.deny;
    list.insert(list.end(), rules->begin(), rules->end());
    if (key == "egress") t->network = true;
  } else if (key == "net-rate") {
    uint64_t rate = 0;
    SP_RETURN_IF_ERROR(size(&rate));
    if (rate == 0) return Status::Error("net-rate: more than 0 (the daemon's --net-rate is the ceiling)");
    t->net_rate = rate;
  } else if (key == "expose") {
    SP_RETURN_IF_ERROR(ParseBool(value, &t->expose));
    t->network = t->network || t->expose;
  } else if (key == "dirs") {
    std::istringstream words(value);
    for (std::string d; words >> d;) {
      if (d.empty() || d[0] != '/' || d.find("..") != std::string::npos) return Status::Error("dirs must be absolute host paths");
      t->sandbox.ro_dirs.push_back(d);
    }
  } else {
    return Status::Error("unknown template key '" + key + "'");
  }
  return Status::Ok();
}

Status BuildTemplates(DaemonConfig* c,
                      const std::vector<std::pair<std::string, std::multimap<std::string, std::string>>>& sections) {
  auto make = [&](const std::string& name, const std::string& runtime, uint32_t min, uint32_t max) {
    TemplateConfig t;
    t.name = name;
    t.min_workers = min;
    t.max_workers = std::max(min, max);
    t.sandbox = c->sandbox;
    t.sandbox.template_name = name;
    t.sandbox.runtime = runtime;
    return t;
  };
  c->templates.clear();
  uint32_t max_default = c->max_workers ? c->max_workers : std::max<uint32_t>(c->workers, 16);
  // The default template keeps a shell warm: shell jobs (what agents send) start with no exec.
  c->templates.push_back(make("default", "sh", c->workers, max_default));
  if (c->python_workers > 0 && ::access(FindRuntime("python")->interpreter, X_OK) == 0) {
    c->templates.push_back(make("python", "python", c->python_workers, c->python_max_workers));
  }
  if (c->node_workers > 0 && ::access(FindRuntime("node")->interpreter, X_OK) == 0) {
    c->templates.push_back(make("node", "node", c->node_workers, c->node_max_workers));
  }
  for (const auto& [name, keys] : sections) {
    int i = FindTemplate(*c, name);
    if (i < 0) {
      c->templates.push_back(make(name, "", 1, 8));
      i = static_cast<int>(c->templates.size()) - 1;
    }
    TemplateConfig& t = c->templates[static_cast<size_t>(i)];
    for (const auto& [key, value] : keys) {
      SP_RETURN_IF_ERROR(ApplyTemplateKey(&t, key, value).Prefixed("[template " + name + "] " + key));
    }
    if (t.max_workers < t.min_workers) t.max_workers = t.min_workers;
  }
  uint64_t min_total = 0;
  for (TemplateConfig& t : c->templates) {
    if (!t.egress.deny.empty() && !t.network) {
      return Status::Error("[template " + t.name + "] egress-deny without egress: the template has no network to deny");
    }
    if (c->net.dns_ttl_min > c->net.dns_ttl_max) return Status::Error("--net-dns-ttl-min is above --net-dns-ttl-max");
    if (t.net_rate && c->net.rate_bytes && *t.net_rate > c->net.rate_bytes) {
      return Status::Error("[template " + t.name + "] net-rate is above the daemon's --net-rate");
    }
    if (t.network && !c->net.on) {
      return Status::Error("[template " + t.name + "] " + (t.egress.allow.empty() ? "expose" : "egress") +
                           " needs the daemon's --net on (docs/design/network.md)");
    }
    min_total += t.min_workers;
    t.sandbox.base_env = JobEnvironment({}, t.env);
    if (t.sandbox.cgroup.memory_bytes > c->limits.max_memory_bytes) {
      return Status::Error("[template " + t.name + "] memory is above --max-memory");
    }
    if (const RuntimeInfo* r = FindRuntime(t.sandbox.runtime)) {
      const char* interp = r->interpreter;
      if (::access(interp, X_OK) != 0) {
        return Status::Error("[template " + t.name + "] runtime " + t.sandbox.runtime + " needs " + interp);
      }
    }
  }
  if (min_total > c->max_sandboxes) {
    return Status::Error("the templates' workers add up to " + std::to_string(min_total) + ", above --max-sandboxes " +
                         std::to_string(c->max_sandboxes));
  }
  // Pool slots, then one build slot per template.
  uint64_t top = uint64_t{c->sandbox.host_id_base} + 2ull * (c->max_sandboxes + c->templates.size());
  if (top > 4294967294ull) return Status::Error("--uid-base leaves no room for the slots' uids");
  return Status::Ok();
}

Result<uint64_t> ParseSize(const std::string& s) {
  if (s.empty()) return Status::Error("empty size");
  uint64_t mult = 1;
  std::string num = s;
  switch (std::toupper(static_cast<unsigned char>(s.back()))) {
    case 'K': mult = 1ull << 10; break;
    case 'M': mult = 1ull << 20; break;
    case 'G': mult = 1ull << 30; break;
    default: break;
  }
  if (mult != 1) num.pop_back();
  auto n = ParseUint(num);
  if (!n.ok()) return Status::Error("not a size: '" + s + "'");
  if (*n > (~0ull) / mult) return Status::Error("size too large: '" + s + "'");
  return *n * mult;
}

Status ParseConfig(int argc, char** argv, DaemonConfig* config, bool* exit_now) {
  *exit_now = false;
  std::map<std::string, std::string> from_flags;
  std::string config_file;
  if (const char* e = std::getenv("SANDPOOL_CONFIG")) config_file = e;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      PrintHelp();
      *exit_now = true;
      return Status::Ok();
    }
    if (arg.rfind("--", 0) != 0) return Status::Error("unexpected argument '" + arg + "' (see --help)");
    std::string name = arg.substr(2), value;
    size_t eq = name.find('=');
    bool has_value = eq != std::string::npos;
    if (has_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const Option* opt = Find(name);
    if (name != "config" && opt == nullptr) return Status::Error("unknown option --" + name + " (see --help)");
    if (!has_value) {
      if (opt != nullptr && opt->is_flag) {
        value = "true";
      } else {
        if (i + 1 >= argc) return Status::Error("--" + name + " needs a value");
        value = argv[++i];
      }
    }
    if (name == "config") config_file = value;
    else from_flags[name] = value;
  }
  std::map<std::string, std::string> from_file;
  // [template NAME] sections: name -> key -> values (env and dirs may repeat).
  std::vector<std::pair<std::string, std::multimap<std::string, std::string>>> sections;
  if (!config_file.empty()) {
    std::ifstream f(config_file);
    if (!f) return Status::Error("cannot read config file " + config_file);
    std::string line;
    int lineno = 0;
    while (std::getline(f, line)) {
      ++lineno;
      // Comments are whole lines: '#' inside a value (a setup line's "#!/bin/sh") is data.
      line = Trim(line);
      if (line.empty() || line[0] == '#' || line[0] == ';') continue;
      std::string where = config_file + ":" + std::to_string(lineno) + ": ";
      if (line.front() == '[') {
        std::string head = Trim(line.substr(1, line.find(']') - 1));
        if (line.back() != ']' || head.rfind("template ", 0) != 0) return Status::Error(where + "expected [template NAME]");
        std::string name = Trim(head.substr(9));
        if (!ValidTemplateName(name)) return Status::Error(where + "bad template name '" + name + "'");
        sections.emplace_back(name, std::multimap<std::string, std::string>{});
        continue;
      }
      size_t eq = line.find('=');
      if (eq == std::string::npos) return Status::Error(where + "expected 'name = value'");
      std::string name = Trim(line.substr(0, eq));
      std::string value = Trim(line.substr(eq + 1));
      if (!sections.empty()) {
        sections.back().second.emplace(name, value);
        continue;
      }
      if (Find(name) == nullptr) return Status::Error(where + "unknown option '" + name + "'");
      from_file[name] = value;
    }
  }
  // Maxima default to the defaults, so a job can lower but not raise its limits unless the
  // operator says so.
  bool max_memory_set = false, max_pids_set = false;
  for (const Option& o : Options()) {
    std::string value;
    bool set = false;
    if (auto it = from_flags.find(o.name); it != from_flags.end()) {
      value = it->second;
      set = true;
    } else if (const char* e = std::getenv(EnvName(o.name).c_str())) {
      value = e;
      set = true;
    } else if (const char* url = std::getenv("SANDPOOL_REDIS_URL"); url != nullptr && std::string_view(o.name) == "redis") {
      // The name every client uses too (the option's own would be SANDPOOL_REDIS).
      value = url;
      set = true;
    } else if (auto ft = from_file.find(o.name); ft != from_file.end()) {
      value = ft->second;
      set = true;
    }
    if (set) SP_RETURN_IF_ERROR(o.set(config, value).Prefixed(std::string("--") + o.name));
    max_memory_set |= set && std::string_view(o.name) == "max-memory";
    max_pids_set |= set && std::string_view(o.name) == "max-pids";
  }
  if (!max_memory_set) config->limits.max_memory_bytes = config->sandbox.cgroup.memory_bytes;
  if (!max_pids_set) config->limits.max_pids = config->sandbox.cgroup.pids;
  if (config->sandbox.cgroup.memory_bytes > config->limits.max_memory_bytes) {
    return Status::Error("--memory must be at most --max-memory");
  }
  if (config->sandbox.cgroup.pids > config->limits.max_pids) return Status::Error("--pids must be at most --max-pids");
  if (config->sandbox.cpu_time_ms > config->limits.max_cpu_time_ms) {
    return Status::Error("--cpu-time-ms must be at most --max-cpu-time-ms");
  }
  auto url = ParseRedisUrl(config->redis_url);
  if (!url.ok()) return url.status().Prefixed("--redis");
  config->redis = *url;
  if (config->consumer.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    config->consumer = host[0] ? host : "sandpoold";
  }
  for (char ch : config->consumer) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.') {
      return Status::Error("--consumer may contain only letters, digits, '-', '_' and '.'");
    }
  }
  if (config->workers == 0 || config->workers > 4096) return Status::Error("--workers must be in 1..4096");
  if (config->limits.default_timeout_ms == 0 || config->limits.default_timeout_ms > config->limits.max_timeout_ms) {
    return Status::Error("--default-timeout-ms must be in 1..max-timeout-ms");
  }
  if (config->limits.default_output_bytes > config->limits.max_output_bytes) {
    return Status::Error("--default-output-bytes must be at most --max-output-bytes");
  }
  if (config->heartbeat_ms == 0 || config->lease_ms / 3 < config->heartbeat_ms) {
    return Status::Error("--lease-ms must be at least 3 x --heartbeat-ms");
  }
  return BuildTemplates(config, sections);
}

}  // namespace sandpool
