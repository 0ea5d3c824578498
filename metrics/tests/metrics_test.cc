// Metrics: names, labels and values as they appear in the text exposition.
#include "metrics/metrics.h"

#include <cmath>
#include <string>

#include <gtest/gtest.h>

namespace sandpool {
namespace {

bool HasLine(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

#define EXPECT_LINE(text, line) EXPECT_TRUE(HasLine(text, line)) << "missing: " << (line) << "\n" << (text)

TEST(Metrics, FreshRegistryHasEveryFixedSeriesAtZero) {
  Metrics m;
  std::string t = m.Serialize();
  EXPECT_LINE(t, "# TYPE sandpool_jobs_received_total counter");
  EXPECT_LINE(t, "sandpool_jobs_received_total 0");
  for (std::string_view o : Metrics::kOutcomes) {
    EXPECT_LINE(t, "sandpool_jobs_completed_total{outcome=\"" + std::string(o) + "\"} 0");
  }
  for (std::string_view c : Metrics::kRejectCodes) {
    EXPECT_LINE(t, "sandpool_jobs_rejected_total{code=\"" + std::string(c) + "\"} 0");
  }
  for (std::string_view s : Metrics::kWorkerStates) {
    EXPECT_LINE(t, "sandpool_workers{state=\"" + std::string(s) + "\"} 0");
  }
  for (std::string_view a : Metrics::kRecoveryActions) {
    EXPECT_LINE(t, "sandpool_jobs_recovered_total{action=\"" + std::string(a) + "\"} 0");
  }
  EXPECT_LINE(t, "sandpool_redis_reconnects_total 0");
  EXPECT_LINE(t, "sandpool_redis_up 0");
  EXPECT_LINE(t, "sandpool_queue_pending_entries 0");
  EXPECT_LINE(t, "sandpool_queue_lag_entries 0");
  EXPECT_LINE(t, "# TYPE sandpool_build_info gauge");
  EXPECT_NE(t.find("sandpool_build_info{version=\""), std::string::npos) << t;
  EXPECT_EQ(t.find("summary"), std::string::npos) << "histograms only";
  EXPECT_EQ(t.find("process_"), std::string::npos) << "no built-in process metrics";
}

TEST(Metrics, CountersCountAndUnknownLabelsFold) {
  Metrics m;
  m.JobReceived();
  m.JobReceived();
  m.JobReceived();
  m.JobCompleted("exit");
  m.JobCompleted("timeout");
  m.JobCompleted("no-such-outcome");  // folds into "error"
  m.JobRejected("bad_version");
  m.JobRejected("made_up_code");  // folds into "other"
  m.RedisReconnect();
  m.RecoveredJob("retried");
  m.RecoveredJob("lost");
  m.RecoveredJob("lost");
  m.RecoveredJob("job-1234");  // ignored: no unbounded labels
  m.SetWorkers("ready", 3);
  m.SetWorkers("busy", 1);
  m.SetWorkers("sleeping", 9);  // ignored
  m.SetQueueDepth(5, 17);
  m.SetRedisConnected(true);

  std::string t = m.Serialize();
  EXPECT_LINE(t, "sandpool_jobs_received_total 3");
  EXPECT_LINE(t, "sandpool_jobs_completed_total{outcome=\"exit\"} 1");
  EXPECT_LINE(t, "sandpool_jobs_completed_total{outcome=\"timeout\"} 1");
  EXPECT_LINE(t, "sandpool_jobs_completed_total{outcome=\"error\"} 1");
  EXPECT_LINE(t, "sandpool_jobs_rejected_total{code=\"bad_version\"} 1");
  EXPECT_LINE(t, "sandpool_jobs_rejected_total{code=\"other\"} 1");
  EXPECT_LINE(t, "sandpool_redis_reconnects_total 1");
  EXPECT_LINE(t, "sandpool_jobs_recovered_total{action=\"retried\"} 1");
  EXPECT_LINE(t, "sandpool_jobs_recovered_total{action=\"lost\"} 2");
  EXPECT_LINE(t, "sandpool_workers{state=\"ready\"} 3");
  EXPECT_LINE(t, "sandpool_workers{state=\"busy\"} 1");
  EXPECT_LINE(t, "sandpool_queue_pending_entries 5");
  EXPECT_LINE(t, "sandpool_queue_lag_entries 17");
  EXPECT_LINE(t, "sandpool_redis_up 1");
  EXPECT_EQ(t.find("no-such-outcome"), std::string::npos);
  EXPECT_EQ(t.find("made_up_code"), std::string::npos);
  EXPECT_EQ(t.find("job-1234"), std::string::npos);
  EXPECT_EQ(t.find("sleeping"), std::string::npos);

  m.SetRedisConnected(false);
  EXPECT_LINE(m.Serialize(), "sandpool_redis_up 0");
}

TEST(Metrics, HistogramsHaveTheConventionalBuckets) {
  Metrics m;
  m.ObserveRunDuration(0.0003);  // below the first bucket
  m.ObserveRunDuration(1.5);
  m.ObserveRunDuration(1000);    // above the last bucket: only +Inf
  m.ObserveRunDuration(-1);      // dropped
  m.ObserveRunDuration(NAN);     // dropped
  m.ObserveQueueWait(0.004);
  m.ObserveSandboxPrepare(0.02);

  std::string t = m.Serialize();
  EXPECT_LINE(t, "# TYPE sandpool_job_run_seconds histogram");
  EXPECT_LINE(t, "sandpool_job_run_seconds_count 3");
  EXPECT_LINE(t, "sandpool_job_run_seconds_sum 1001.5003");
  EXPECT_LINE(t, "sandpool_job_run_seconds_bucket{le=\"0.0005\"} 1");
  EXPECT_LINE(t, "sandpool_job_run_seconds_bucket{le=\"1\"} 1");
  EXPECT_LINE(t, "sandpool_job_run_seconds_bucket{le=\"2.5\"} 2");
  EXPECT_LINE(t, "sandpool_job_run_seconds_bucket{le=\"600\"} 2");
  EXPECT_LINE(t, "sandpool_job_run_seconds_bucket{le=\"+Inf\"} 3");
  EXPECT_LINE(t, "sandpool_queue_wait_seconds_count 1");
  EXPECT_LINE(t, "sandpool_queue_wait_seconds_bucket{le=\"0.002\"} 0");
  EXPECT_LINE(t, "sandpool_queue_wait_seconds_bucket{le=\"0.005\"} 1");
  EXPECT_LINE(t, "sandpool_sandbox_prepare_seconds_count 1");
  EXPECT_LINE(t, "sandpool_sandbox_prepare_seconds_bucket{le=\"0.025\"} 1");

  // 19 finite buckets + Inf for each histogram made at start (the three of jobs and the
  // session start's; per-operation ones appear with their first sample).
  size_t buckets = 0;
  for (size_t pos = 0; (pos = t.find("_seconds_bucket{", pos)) != std::string::npos; ++pos) {
    ++buckets;
  }
  EXPECT_EQ(buckets, 4u * 20u);
}

TEST(Metrics, SessionSeriesAppearWithUse) {
  Metrics m;
  m.SetSessions("running", 2);
  m.SessionOp("exec", "exit", 0.004);
  m.SessionOp("read", "not_found", 0.001);
  m.ObserveSessionStart(0.03);
  m.SessionFileBytes(100);
  std::string t = m.Serialize();
  EXPECT_LINE(t, "sandpool_sessions{state=\"running\"} 2");
  EXPECT_LINE(t, "sandpool_session_ops_total{op=\"exec\",result=\"exit\"} 1");
  EXPECT_LINE(t, "sandpool_session_ops_total{op=\"read\",result=\"not_found\"} 1");
  EXPECT_LINE(t, "sandpool_session_op_seconds_count{op=\"exec\"} 1");
  EXPECT_LINE(t, "sandpool_session_start_seconds_count 1");
  EXPECT_LINE(t, "sandpool_session_file_request_bytes_total 100");
}

TEST(Metrics, NamesFollowConventions) {
  Metrics m;
  std::string t = m.Serialize();
  size_t pos = 0;
  while ((pos = t.find("# TYPE ", pos)) != std::string::npos) {
    size_t end = t.find('\n', pos);
    std::string line = t.substr(pos + 7, end - pos - 7);
    pos = end;
    std::string name = line.substr(0, line.find(' '));
    std::string type = line.substr(line.find(' ') + 1);
    EXPECT_EQ(name.rfind("sandpool_", 0), 0u) << name;
    bool ends_total = name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0;
    EXPECT_EQ(type == "counter", ends_total) << name << " " << type;
    EXPECT_NE(type, "summary") << name;
  }
}

TEST(Metrics, RegistryIsUsableForExtraFamilies) {
  Metrics m;
  EXPECT_FALSE(m.registry().Collect().empty());
}

}  // namespace
}  // namespace sandpool
