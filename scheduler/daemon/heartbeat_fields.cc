#include "scheduler/daemon/heartbeat_fields.h"

#include <cmath>

namespace sandpool {
namespace {

void PackMs(RecordPacker& pk, const std::optional<double>& ms) {
  if (ms) {
    pk.pack(static_cast<uint64_t>(std::llround(*ms)));
  } else {
    pk.pack_nil();
  }
}

}  // namespace

void PackPools(RecordPacker& pk, const DaemonConfig& config, const Pools& pools) {
  pk.pack_map(static_cast<uint32_t>(config.templates.size()));
  for (uint32_t t = 0; t < config.templates.size(); ++t) {
    pk.pack(config.templates[t].name);
    pk.pack_map(4);
    pk.pack("ready"), pk.pack(static_cast<uint64_t>(pools.ReadyCount(t)));
    pk.pack("busy"), pk.pack(static_cast<uint64_t>(pools.BusyCount(t)));
    pk.pack("slots"), pk.pack(static_cast<uint64_t>(pools.PoolSize(t)));
    pk.pack("max"), pk.pack(static_cast<uint64_t>(config.templates[t].max_workers));
  }
}

void PackRecent(RecordPacker& pk, const RecentJobs::Summary& s) {
  pk.pack_map(7);
  pk.pack("window_s"), pk.pack(static_cast<uint64_t>(RecentJobs::kWindowUs / 1000000));
  pk.pack("jobs"), pk.pack(s.jobs);
  pk.pack("outcomes"), pk.pack_map(static_cast<uint32_t>(s.outcomes.size()));
  for (const auto& [outcome, n] : s.outcomes) pk.pack(outcome), pk.pack(n);
  pk.pack("start_p50_ms"), PackMs(pk, s.start_p50_ms);
  pk.pack("start_p99_ms"), PackMs(pk, s.start_p99_ms);
  pk.pack("run_p50_ms"), PackMs(pk, s.run_p50_ms);
  pk.pack("run_p99_ms"), PackMs(pk, s.run_p99_ms);
}

}  // namespace sandpool
