// A Clock (common/clock.h) that moves only when the test moves it: a unit test steps past a
// timeout instead of sleeping through it. Starts at the real time, so values it gives look like
// the daemon's (Redis stream ids and records compare wall-clock milliseconds).
#pragma once

#include "common/clock.h"

namespace sandpool {

class ManualClock final : public Clock {
 public:
  int64_t MonotonicUs() const override { return mono_us_; }
  int64_t WallMs() const override { return wall_ms_; }
  void AdvanceMs(int64_t ms) {
    mono_us_ += ms * 1000;
    wall_ms_ += ms;
  }

 private:
  int64_t mono_us_ = sandpool::MonotonicUs();
  int64_t wall_ms_ = sandpool::WallMs();
};

}  // namespace sandpool
