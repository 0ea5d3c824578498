// The result map's fields (PROTOCOL.md section 5), in wire order after `v`: the one list that the
// encoder (protocol.cc), the decoder (protocol_decode.cc) and the CLI's JSON (clients/cli/
// output.cc) all walk. A new field goes into JobResult and here, nowhere else.
//
// VisitResultFields(r, v) calls, for each field in order, v.Str / v.Bytes / v.Bool / v.U64 /
// v.U32 / v.OptInt / v.Outcome / v.Error / v.Network with the field's name and a reference to its member
// (const when `r` is const).
#pragma once

#include <cstddef>

namespace sandpool {

template <typename R, typename V>
void VisitResultFields(R& r, V&& v) {
  v.Str("id", r.id);
  v.Outcome("outcome", r.outcome);
  v.OptInt("exit_code", r.exit_code);
  v.OptInt("signal", r.signal);
  v.Bool("timed_out", r.timed_out);
  v.Bool("killed", r.killed);
  v.Bytes("stdout", r.stdout_data);
  v.Bytes("stderr", r.stderr_data);
  v.Bool("stdout_truncated", r.stdout_truncated);
  v.Bool("stderr_truncated", r.stderr_truncated);
  v.U64("stdout_dropped_bytes", r.stdout_dropped_bytes);
  v.U64("stderr_dropped_bytes", r.stderr_dropped_bytes);
  v.U64("exec_time_us", r.exec_time_us);
  v.U64("cpu_time_us", r.cpu_time_us);
  v.U64("peak_memory_bytes", r.peak_memory_bytes);
  v.U64("queue_wait_us", r.queue_wait_us);
  v.Str("worker", r.worker);
  v.U32("attempt", r.attempt);
  v.Error("error", r.error);
  v.Network("network", r.network);  // only jobs of network templates have it (in the map too)
}

// How many fields VisitResultFields names (the map also has `v`), `network` included.
inline constexpr size_t kResultFieldCount = 20;

}  // namespace sandpool
