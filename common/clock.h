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

// The same two clocks behind an interface, for the classes whose decisions depend on time
// (Sessions' idle and lifetime stops, ...): they take a `const Clock&`, the daemon gives them
// SystemClock(), and a unit test a clock it moves itself (tests/support/manual_clock.h), so it
// can step past a timeout without waiting for it. Timers on the loop still run on real time.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t MonotonicUs() const = 0;
  virtual int64_t WallMs() const = 0;
};

// The real clocks above. A static object: valid for the whole program.
const Clock& SystemClock();

// `ms` milliseconds as a struct timeval (libevent timers).
inline struct timeval TimevalMs(int64_t ms) {
  return {static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
}

}  // namespace sandpool
