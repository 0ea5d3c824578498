// The heartbeat record's fields for `sandpool top` (PROTOCOL.md section 10): each template's pool
// on this host, and the last minute of jobs. The Daemon writes the rest of the record.
#pragma once

#include <msgpack.hpp>

#include "metrics/recent.h"
#include "scheduler/config/config.h"
#include "scheduler/jobs/pools.h"

namespace sandpool {

using RecordPacker = msgpack::packer<msgpack::sbuffer>;

// {<template>: {ready, busy, slots, max}} for every configured template.
void PackPools(RecordPacker& pk, const DaemonConfig& config, const Pools& pools);
// {window_s, jobs, outcomes: {<outcome>: n}, start_p50_ms, start_p99_ms, run_p50_ms,
// run_p99_ms}; a percentile without samples is nil.
void PackRecent(RecordPacker& pk, const RecentJobs::Summary& s);

}  // namespace sandpool
