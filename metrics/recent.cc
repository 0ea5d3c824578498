#include "metrics/recent.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace sandpool {
namespace {

template <typename T>
void Push(std::deque<T>& q, T v) {
  q.push_back(std::move(v));
  if (q.size() > RecentJobs::kMaxSamples) q.pop_front();
}

// Nearest-rank percentile of sorted values.
double Rank(const std::vector<double>& sorted, double p) {
  size_t k = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size(), std::max<size_t>(k, 1)) - 1];
}

}  // namespace

void RecentJobs::Completed(std::string_view outcome, int64_t now_us) {
  Push(completed_, std::make_pair(now_us, std::string(outcome)));
}

void RecentJobs::Started(double seconds, int64_t now_us) { Push(started_, Sample{now_us, seconds}); }

void RecentJobs::Ran(double seconds, int64_t now_us) { Push(ran_, Sample{now_us, seconds}); }

RecentJobs::Summary RecentJobs::Last(int64_t now_us) {
  int64_t since = now_us - kWindowUs;
  while (!completed_.empty() && completed_.front().first < since) completed_.pop_front();
  while (!started_.empty() && started_.front().at_us < since) started_.pop_front();
  while (!ran_.empty() && ran_.front().at_us < since) ran_.pop_front();
  Summary s;
  s.jobs = completed_.size();
  for (const auto& [at, outcome] : completed_) ++s.outcomes[outcome];
  auto percentiles = [](const std::deque<Sample>& q, std::optional<double>* p50, std::optional<double>* p99) {
    if (q.empty()) return;
    std::vector<double> v;
    v.reserve(q.size());
    for (const Sample& x : q) v.push_back(x.value * 1000.0);
    std::sort(v.begin(), v.end());
    *p50 = Rank(v, 0.5);
    *p99 = Rank(v, 0.99);
  };
  percentiles(started_, &s.start_p50_ms, &s.start_p99_ms);
  percentiles(ran_, &s.run_p50_ms, &s.run_p99_ms);
  return s;
}

}  // namespace sandpool
