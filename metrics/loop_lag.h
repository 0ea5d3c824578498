// LoopLagProbe: measures how late the daemon's event loop runs its timers. Every `interval_ms`
// a timer is due; the time by which it fires late (work that held the loop: a long callback, a
// slow disk, the host out of CPU) goes to sandpool_event_loop_lag_seconds. A wedged loop stops
// the probe too: then nothing is observed, and /livez stops answering.
//
// Lifetime: destroy before `base`; `metrics` must outlive it. Loop thread only.
#pragma once

#include <event2/event.h>

#include <cstdint>

#include "metrics/metrics.h"

namespace sandpool {

class LoopLagProbe {
 public:
  LoopLagProbe(struct event_base* base, Metrics* metrics, int interval_ms = 250);
  ~LoopLagProbe();
  LoopLagProbe(const LoopLagProbe&) = delete;
  LoopLagProbe& operator=(const LoopLagProbe&) = delete;

 private:
  static void OnTimer(evutil_socket_t, short, void* arg);
  void Arm();

  Metrics* metrics_;
  int interval_ms_;
  struct event* ev_ = nullptr;
  int64_t due_us_ = 0;
};

}  // namespace sandpool
