// sandpoold's configuration. Every option has one name, used three ways, in this precedence:
//   1. a flag:                 --max-timeout-ms 60000   (or --max-timeout-ms=60000)
//   2. the environment:        SANDPOOL_MAX_TIMEOUT_MS=60000
//   3. the config file:        max-timeout-ms = 60000   (--config FILE or SANDPOOL_CONFIG;
//                              lines starting with # are comments; [template NAME] sections)
// then the built-in default. Sizes take K, M, G suffixes (powers of 1024). `--help` lists all.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/status.h"
#include "queue/protocol.h"
#include "queue/redis_url.h"
#include "scheduler/config/egress_policy.h"
#include "worker/sandbox/sandbox_config.h"

namespace sandpool {

// A template: an environment jobs can name, with its own warm pool. See docs/ARCHITECTURE.md.
struct TemplateConfig {
  std::string name;
  // The template's egress policy (`egress`, `egress-deny`): the most any of its sandboxes may
  // reach. No `egress` key: a no-network template (loopback only, no veth, nothing to enforce).
  bool network = false;  // egress or expose: its slots get a link (worker/sandbox/netns_setup.h)
  EgressPolicy egress;
  bool expose = false;   // `expose = on`: its sessions may expose ports (preview URLs)
  std::optional<uint64_t> net_rate;  // `net-rate`: lower than the daemon's --net-rate
  uint32_t min_workers = 1;  // sandboxes kept ready (or busy) at all times
  uint32_t max_workers = 8;  // demand may grow the pool up to here, within the host budget
  SandboxConfig sandbox;     // runtime, limits, root directories, base environment
  std::vector<std::string> env;  // "NAME=value" every job of the template gets (jobs override)
  std::vector<std::string> setup;  // shell lines baked into the template's layer at start-up
};

// Network templates (docs/design/network.md; operator options --net*).
struct NetConfig {
  bool on = false;                      // off: templates with egress keys fail to load
  Cidr pool{0x0ac80000u, 16};           // 10.200.0.0/16: two addresses per slot number
  bool set_ip_forward = false;          // --net-ip-forward=set (default: require it to be on)
  uint32_t connections = 256;           // concurrent connections per sandbox
  uint32_t new_connections = 50;        // new connections per second per sandbox (burst 2x)
  uint64_t rate_bytes = 12ull << 20;    // bandwidth per sandbox and direction (0: unlimited)
  std::vector<Cidr> allow_private;      // ranges taken out of the always-refused ones (--net-allow-private)
  std::vector<Cidr> refuse;             // more always-refused ranges (--net-refuse: the host's public NAT address ...)
  std::string dns_upstream;             // resolvers names are forwarded to ("": the host's resolv.conf)
  uint32_t dns_ttl_min = 300, dns_ttl_max = 3600;  // how long a resolved address stays open (s)
  uint32_t dns_qps = 50;                // DNS questions per second per sandbox (burst 2x)
  std::string preview_listen = "0.0.0.0:8480";  // the preview proxy's socket; "off": none
  std::string preview_url;              // URL base of previews ("": http://<host name>:{port}/)
  // Exposed ports' host ports (0: none, the default): a host port takes connections from anyone
  // without a token, so it opens a way in to the sandbox whatever its egress policy says.
  uint16_t host_port_lo = 0, host_port_hi = 0;
};

struct DaemonConfig {
  std::string redis_url = "redis://127.0.0.1:6379";
  RedisUrl redis;
  std::string metrics_addr = "127.0.0.1:9464";  // "off" disables the HTTP endpoints
  uint32_t workers = 8;
  std::string queue = "default";
  std::string consumer;  // default: the host name
  std::string prefix = "sandpool";
  LogLevel log_level = LogLevel::kInfo;
  uint64_t result_ttl_s = 86400;
  uint64_t grace_ms = 30000;
  uint64_t heartbeat_ms = 1000;
  uint64_t lease_ms = 15000;       // a pending entry idle this long belongs to a dead daemon
  uint64_t max_payload_bytes = 20ull << 20;
  std::string cgroup_mode = "auto";
  bool allow_missing_controllers = false;
  // --cpu-policy: SCHED_BATCH for the daemon and everything it starts (main.cc), else SCHED_OTHER.
  bool cpu_batch = true;
  ServerLimits limits;
  SandboxConfig sandbox;  // the defaults every template starts from
  uint32_t max_workers = 0;          // default template's maximum (0: max(workers, 16))
  uint32_t python_workers = 2, python_max_workers = 8;
  uint32_t node_workers = 1, node_max_workers = 4;
  uint32_t max_sandboxes = 64;       // host-wide: pool slots across all templates
  uint64_t memory_budget_bytes = 0;  // host-wide: sum of the slots' memory limits (0: 3/4 of RAM)
  std::string state_dir = "/var/lib/sandpool";  // template layers, session disks
  // Sessions (PROTOCOL.md section 17).
  uint64_t session_disk_bytes = 1ull << 30;       // a session's disk when it names none
  uint64_t max_session_disk_bytes = 64ull << 30;  // the largest it may name
  uint64_t session_idle_timeout_ms = 1800000;     // when it names none (0: never)
  uint32_t session_spares = 1;                    // warm session sandboxes per template in use
  uint64_t max_snapshot_bytes = 256ull << 20;     // data in one snapshot (what Redis holds of it)
  uint64_t setup_timeout_ms = 600000;
  NetConfig net;
  std::vector<TemplateConfig> templates;  // [0] is "default"
};

// Index of the template named `name`, or -1.
int FindTemplate(const DaemonConfig& c, const std::string& name);

// Parses argv (and the environment and config file they point to). On --help, prints usage to
// stdout and sets *exit_now. Errors name the offending option.
Status ParseConfig(int argc, char** argv, DaemonConfig* config, bool* exit_now);

// "512M" -> 536870912. Plain numbers are bytes.
Result<uint64_t> ParseSize(const std::string& s);

}  // namespace sandpool
