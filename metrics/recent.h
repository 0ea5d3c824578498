// RecentJobs: what this daemon's jobs did over the last minute, for its heartbeat record
// (PROTOCOL.md section 10, `recent`) and so for `sandpool top`, which reads Redis only. Prometheus
// has the same events as counters and histograms (metrics.h feeds both from the same calls).
//
// Memory is bounded: at most kMaxSamples of each kind are kept (a faster daemon's percentiles are
// then those of its latest kMaxSamples jobs). Loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace sandpool {

class RecentJobs {
 public:
  static constexpr int64_t kWindowUs = 60 * 1000000;
  static constexpr size_t kMaxSamples = 20000;

  struct Summary {
    uint64_t jobs = 0;                        // completed in the window
    std::map<std::string, uint64_t> outcomes;  // of those, by outcome (only the ones seen)
    // Percentiles in milliseconds; nullopt without samples.
    std::optional<double> start_p50_ms, start_p99_ms, run_p50_ms, run_p99_ms;
  };

  void Completed(std::string_view outcome, int64_t now_us);
  void Started(double seconds, int64_t now_us);
  void Ran(double seconds, int64_t now_us);
  // Drops what is older than the window, then summarises the rest.
  Summary Last(int64_t now_us);

 private:
  struct Sample {
    int64_t at_us;
    double value;
  };
  std::deque<std::pair<int64_t, std::string>> completed_;
  std::deque<Sample> started_, ran_;
};

}  // namespace sandpool
