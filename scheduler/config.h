// sandpoold's configuration. Every option has one name, used three ways, in this precedence:
//   1. a flag:                 --max-timeout-ms 60000   (or --max-timeout-ms=60000)
//   2. the environment:        SANDPOOL_MAX_TIMEOUT_MS=60000
//   3. the config file:        max-timeout-ms = 60000   (--config FILE or SANDPOOL_CONFIG)
// then the built-in default. Sizes take K, M, G suffixes (powers of 1024). `--help` lists all.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/status.h"
#include "queue/protocol.h"
#include "queue/redis_url.h"
#include "worker/sandbox_config.h"

namespace sandpool {

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
  ServerLimits limits;
  SandboxConfig sandbox;
};

// Parses argv (and the environment and config file they point to). On --help, prints usage to
// stdout and sets *exit_now. Errors name the offending option.
Status ParseConfig(int argc, char** argv, DaemonConfig* config, bool* exit_now);

// "512M" -> 536870912. Plain numbers are bytes.
Result<uint64_t> ParseSize(const std::string& s);

}  // namespace sandpool
