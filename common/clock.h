// Clocks. Monotonic for durations and timers; wall clock only for timestamps shown to people
// or compared with Redis stream ids (which are wall-clock milliseconds).
#pragma once

#include <time.h>

#include <cstdint>

namespace sandpool {

inline int64_t MonotonicUs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000 + ts.tv_nsec / 1000;
}

inline int64_t WallMs() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace sandpool
