// RecentJobs: the last minute of jobs, as the heartbeat record shows it. Time is passed in, so
// the window is tested without waiting.
#include "metrics/recent.h"

#include <gtest/gtest.h>

namespace sandpool {
namespace {

constexpr int64_t kS = 1000000;

TEST(RecentJobs, CountsOutcomesAndPercentilesWithinTheWindow) {
  RecentJobs r;
  for (int i = 1; i <= 100; ++i) {
    r.Completed(i % 10 == 0 ? "timeout" : "exit", 10 * kS);
    r.Started(i / 1000.0, 10 * kS);  // 1 ms .. 100 ms
    r.Ran(2.0, 10 * kS);
  }
  RecentJobs::Summary s = r.Last(20 * kS);
  EXPECT_EQ(s.jobs, 100u);
  EXPECT_EQ(s.outcomes["exit"], 90u);
  EXPECT_EQ(s.outcomes["timeout"], 10u);
  EXPECT_EQ(s.outcomes.size(), 2u);
  ASSERT_TRUE(s.start_p50_ms && s.start_p99_ms && s.run_p50_ms && s.run_p99_ms);
  EXPECT_DOUBLE_EQ(*s.start_p50_ms, 50);
  EXPECT_DOUBLE_EQ(*s.start_p99_ms, 99);
  EXPECT_DOUBLE_EQ(*s.run_p50_ms, 2000);
}

TEST(RecentJobs, ForgetsWhatIsOlderThanAMinute) {
  RecentJobs r;
  r.Completed("exit", 0);
  r.Started(0.5, 0);
  r.Completed("signal", 50 * kS);
  RecentJobs::Summary s = r.Last(61 * kS);
  EXPECT_EQ(s.jobs, 1u);
  EXPECT_EQ(s.outcomes.count("exit"), 0u);
  EXPECT_FALSE(s.start_p50_ms.has_value());
  s = r.Last(200 * kS);
  EXPECT_EQ(s.jobs, 0u);
  EXPECT_TRUE(s.outcomes.empty());
}

TEST(RecentJobs, KeepsAtMostMaxSamples) {
  RecentJobs r;
  for (size_t i = 0; i < RecentJobs::kMaxSamples + 10; ++i) r.Completed("exit", 1);
  EXPECT_EQ(r.Last(2).jobs, RecentJobs::kMaxSamples);
}

}  // namespace
}  // namespace sandpool
