#include "common/clock.h"

namespace sandpool {
namespace {

class RealClock final : public Clock {
 public:
  int64_t MonotonicUs() const override { return sandpool::MonotonicUs(); }
  int64_t WallMs() const override { return sandpool::WallMs(); }
};

}  // namespace

const Clock& SystemClock() {
  static const RealClock clock;
  return clock;
}

}  // namespace sandpool
