#include "metrics/loop_lag.h"

#include "common/clock.h"

namespace sandpool {

LoopLagProbe::LoopLagProbe(struct event_base* base, Metrics* metrics, int interval_ms)
    : metrics_(metrics), interval_ms_(interval_ms) {
  ev_ = evtimer_new(base, &LoopLagProbe::OnTimer, this);
  if (ev_ != nullptr) Arm();
}

LoopLagProbe::~LoopLagProbe() {
  if (ev_ != nullptr) event_free(ev_);
}

void LoopLagProbe::Arm() {
  // One-shot and re-armed from the callback, so a late firing is measured once, not made up
  // for by a burst of EV_PERSIST catch-up runs.
  struct timeval tv = {interval_ms_ / 1000, (interval_ms_ % 1000) * 1000};
  due_us_ = MonotonicUs() + int64_t{interval_ms_} * 1000;
  evtimer_add(ev_, &tv);
}

void LoopLagProbe::OnTimer(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<LoopLagProbe*>(arg);
  int64_t late_us = MonotonicUs() - self->due_us_;
  self->metrics_->ObserveLoopLag(late_us > 0 ? static_cast<double>(late_us) / 1e6 : 0.0);
  self->Arm();
}

}  // namespace sandpool
