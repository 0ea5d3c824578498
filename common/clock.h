// Clocks. Monotonic for durations and timers; wall clock only for timestamps shown to people
// or compared with Redis stream ids (which are wall-clock milliseconds).
#pragma once

#include <sys/time.h>
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

// `ms` milliseconds as a struct timeval (libevent timers).
inline struct timeval TimevalMs(int64_t ms) {
  return {static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
}

}  // namespace sandpool
