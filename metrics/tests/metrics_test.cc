// Metrics: names, labels and values as they appear in the text exposition.
#include "metrics/metrics.h"

#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
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
  m.AddQueue("default");
  m.AddTemplate("python", 8);
  std::string t = m.Serialize();
  EXPECT_LINE(t, "# TYPE sandpool_jobs_received_total counter");
  EXPECT_LINE(t, "sandpool_jobs_received_total 0");
  for (std::string_view o : Metrics::kOutcomes) {
    EXPECT_LINE(t, "sandpool_jobs_completed_total{outcome=\"" + std::string(o) + "\",template=\"python\"} 0");
    EXPECT_LINE(t, "sandpool_jobs_completed_total{outcome=\"" + std::string(o) + "\",template=\"(other)\"} 0");
  }
  for (std::string_view c : Metrics::kRejectCodes) {
    EXPECT_LINE(t, "sandpool_jobs_rejected_total{code=\"" + std::string(c) + "\"} 0");
    EXPECT_LINE(t, "sandpool_dead_letters_total{code=\"" + std::string(c) + "\"} 0");
  }
  for (std::string_view s : Metrics::kWorkerStates) {
    EXPECT_LINE(t, "sandpool_workers{state=\"" + std::string(s) + "\"} 0");
  }
  for (std::string_view a : Metrics::kRecoveryActions) {
    EXPECT_LINE(t, "sandpool_jobs_recovered_total{action=\"" + std::string(a) + "\",template=\"python\"} 0");
  }
  for (std::string_view r : Metrics::kRefillFailures) {
    EXPECT_LINE(t, "sandpool_pool_refill_failures_total{reason=\"" + std::string(r) + "\",template=\"python\"} 0");
  }
  EXPECT_LINE(t, "sandpool_pool_max_sandboxes{template=\"python\"} 8");
  EXPECT_LINE(t, "sandpool_jobs_waiting{template=\"python\"} 0");
  EXPECT_LINE(t, "sandpool_redis_reconnects_total 0");
  EXPECT_LINE(t, "sandpool_redis_errors_total 0");
  EXPECT_LINE(t, "sandpool_redis_reads_carried_total 0");
  EXPECT_LINE(t, "sandpool_redis_up 0");
  EXPECT_LINE(t, "sandpool_heartbeat_last_success_timestamp_seconds 0");
  EXPECT_LINE(t, "sandpool_queue_pending_entries{queue=\"default\"} 0");
  EXPECT_LINE(t, "sandpool_queue_lag_entries{queue=\"default\"} 0");
  EXPECT_LINE(t, "sandpool_queue_oldest_waiting_seconds{queue=\"default\"} 0");
  EXPECT_LINE(t, "# TYPE sandpool_build_info gauge");
  EXPECT_NE(t.find("sandpool_build_info{version=\""), std::string::npos) << t;
  EXPECT_EQ(t.find("summary"), std::string::npos) << "histograms only";
  EXPECT_EQ(t.find("process_"), std::string::npos) << "no built-in process metrics";
}

TEST(Metrics, CountersCountAndUnknownLabelsFold) {
  Metrics m;
  m.AddQueue("default");
  size_t py = m.AddTemplate("python", 4);
  m.JobReceived();
  m.JobReceived();
  m.JobReceived();
  m.JobCompleted("python", "exit");
  m.JobCompleted("python", "timeout");
  m.JobCompleted("python", "no-such-outcome");  // folds into "error"
  m.JobCompleted("my-snapshot", "exit");         // folds into "(other)": snapshot names are users'
  m.JobRejected("bad_version");
  m.JobRejected("made_up_code");  // folds into "other"
  m.DeadLetter("bad_payload");
  m.RedisReconnect();
  m.RedisError();
  m.RecoveredJob(py, "retried");
  m.RecoveredJob(py, "lost");
  m.RecoveredJob(py, "lost");
  m.RecoveredJob(py, "job-1234");  // ignored: no unbounded labels
  m.RecoveredJob(99, "lost");      // no such template: ignored
  m.PoolRefillFailed(py, "keeper_lost");
  m.PoolRefillFailed(py, "whatever");  // ignored
  m.SetWorkers("ready", 3);
  m.SetWorkers("busy", 1);
  m.SetWorkers("sleeping", 9);  // ignored
  m.SetQueue(5, 17, 2.5);
  m.SetPool(py, 1, 2, 4, 3);
  m.SetRedisConnected(true);
  m.HeartbeatWritten(1700000000.5);

  std::string t = m.Serialize();
  EXPECT_LINE(t, "sandpool_jobs_received_total 3");
  EXPECT_LINE(t, "sandpool_jobs_completed_total{outcome=\"exit\",template=\"python\"} 1");
  EXPECT_LINE(t, "sandpool_jobs_completed_total{outcome=\"timeout\",template=\"python\"} 1");
  EXPECT_LINE(t, "sandpool_jobs_completed_total{outcome=\"error\",template=\"python\"} 1");
  EXPECT_LINE(t, "sandpool_jobs_completed_total{outcome=\"exit\",template=\"(other)\"} 1");
  EXPECT_LINE(t, "sandpool_jobs_rejected_total{code=\"bad_version\"} 1");
  EXPECT_LINE(t, "sandpool_jobs_rejected_total{code=\"other\"} 1");
  EXPECT_LINE(t, "sandpool_dead_letters_total{code=\"bad_payload\"} 1");
  EXPECT_LINE(t, "sandpool_redis_reconnects_total 1");
  EXPECT_LINE(t, "sandpool_redis_errors_total 1");
  EXPECT_LINE(t, "sandpool_jobs_recovered_total{action=\"retried\",template=\"python\"} 1");
  EXPECT_LINE(t, "sandpool_jobs_recovered_total{action=\"lost\",template=\"python\"} 2");
  EXPECT_LINE(t, "sandpool_pool_refill_failures_total{reason=\"keeper_lost\",template=\"python\"} 1");
  EXPECT_LINE(t, "sandpool_workers{state=\"ready\"} 3");
  EXPECT_LINE(t, "sandpool_workers{state=\"busy\"} 1");
  EXPECT_LINE(t, "sandpool_queue_pending_entries{queue=\"default\"} 5");
  EXPECT_LINE(t, "sandpool_queue_lag_entries{queue=\"default\"} 17");
  EXPECT_LINE(t, "sandpool_queue_oldest_waiting_seconds{queue=\"default\"} 2.5");
  EXPECT_LINE(t, "sandpool_pool_ready_sandboxes{template=\"python\"} 1");
  EXPECT_LINE(t, "sandpool_pool_busy_sandboxes{template=\"python\"} 2");
  EXPECT_LINE(t, "sandpool_pool_sandboxes{template=\"python\"} 4");
  EXPECT_LINE(t, "sandpool_jobs_waiting{template=\"python\"} 3");
  EXPECT_LINE(t, "sandpool_redis_up 1");
  EXPECT_LINE(t, "sandpool_heartbeat_last_success_timestamp_seconds 1700000000.5");
  EXPECT_EQ(t.find("no-such-outcome"), std::string::npos);
  EXPECT_EQ(t.find("made_up_code"), std::string::npos);
  EXPECT_EQ(t.find("my-snapshot"), std::string::npos);
  EXPECT_EQ(t.find("job-1234"), std::string::npos);
  EXPECT_EQ(t.find("whatever"), std::string::npos);
  EXPECT_EQ(t.find("sleeping"), std::string::npos);

  m.SetRedisConnected(false);
  EXPECT_LINE(m.Serialize(), "sandpool_redis_up 0");
}

TEST(Metrics, HistogramsHaveTheConventionalBuckets) {
  Metrics m;
  size_t py = m.AddTemplate("python", 4);
  m.ObserveRunDuration(py, 0.0003);  // below the first bucket
  m.ObserveRunDuration(py, 1.5);
  m.ObserveRunDuration(py, 1000);    // above the last bucket: only +Inf
  m.ObserveRunDuration(py, -1);      // dropped
  m.ObserveRunDuration(py, NAN);     // dropped
  m.ObserveQueueWait(0.004);
  m.ObserveSandboxPrepare(py, 0.02);
  m.ObserveScheduleToStart(py, 0.003);
  m.ObserveRedisCommand(0.0002);
  m.ObserveLoopLag(0.0);

  std::string t = m.Serialize();
  const std::string py_label = "template=\"python\"";
  EXPECT_LINE(t, "# TYPE sandpool_job_run_seconds histogram");
  EXPECT_LINE(t, "sandpool_job_run_seconds_count{" + py_label + "} 3");
  EXPECT_LINE(t, "sandpool_job_run_seconds_sum{" + py_label + "} 1001.5003");
  EXPECT_LINE(t, "sandpool_job_run_seconds_bucket{" + py_label + ",le=\"0.0005\"} 1");
  EXPECT_LINE(t, "sandpool_job_run_seconds_bucket{" + py_label + ",le=\"1\"} 1");
  EXPECT_LINE(t, "sandpool_job_run_seconds_bucket{" + py_label + ",le=\"2.5\"} 2");
  EXPECT_LINE(t, "sandpool_job_run_seconds_bucket{" + py_label + ",le=\"600\"} 2");
  EXPECT_LINE(t, "sandpool_job_run_seconds_bucket{" + py_label + ",le=\"+Inf\"} 3");
  EXPECT_LINE(t, "sandpool_queue_wait_seconds_count 1");
  EXPECT_LINE(t, "sandpool_queue_wait_seconds_bucket{le=\"0.002\"} 0");
  EXPECT_LINE(t, "sandpool_queue_wait_seconds_bucket{le=\"0.005\"} 1");
  EXPECT_LINE(t, "sandpool_sandbox_prepare_seconds_count{" + py_label + "} 1");
  EXPECT_LINE(t, "sandpool_sandbox_prepare_seconds_bucket{" + py_label + ",le=\"0.025\"} 1");
  EXPECT_LINE(t, "sandpool_job_schedule_to_start_seconds_bucket{" + py_label + ",le=\"0.005\"} 1");
  EXPECT_LINE(t, "sandpool_redis_command_seconds_bucket{le=\"0.0005\"} 1");
  EXPECT_LINE(t, "sandpool_event_loop_lag_seconds_count 1");

  // 19 finite buckets + Inf for each histogram made at start: queue wait, Redis round trip,
  // loop lag, session start, and the template's pool wait, prepare, run and schedule-to-start
  // (per-operation ones appear with their first sample).
  size_t buckets = 0;
  for (size_t pos = 0; (pos = t.find("_seconds_bucket{", pos)) != std::string::npos; ++pos) {
    ++buckets;
  }
  EXPECT_EQ(buckets, 8u * 20u);
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

// docs/METRICS.md is the one list of metrics: every family the registry has (each method used
// once, so the families whose series appear on first use are there too) is in its table with the
// same type and labels, and every row of the table is a family of the registry.
struct Family {
  std::string type;
  std::set<std::string> labels;
  bool operator==(const Family& o) const { return type == o.type && labels == o.labels; }
};

std::ostream& operator<<(std::ostream& os, const Family& f) {
  os << f.type << " {";
  for (const std::string& l : f.labels) os << l << ",";
  return os << "}";
}

std::map<std::string, Family> TableOfDocs() {
  std::ifstream in(std::string(SANDPOOL_SOURCE_DIR) + "/docs/METRICS.md");
  std::map<std::string, Family> out;
  std::regex row(R"(^\|\s*`(sandpool_[a-z0-9_]+)`\s*\|\s*([a-z]+)\s*\|([^|]*)\|)");
  std::regex label("`([a-z_]+)`");
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    Family f{m[2], {}};
    std::string cell = m[3];
    for (std::sregex_iterator it(cell.begin(), cell.end(), label), end; it != end; ++it) f.labels.insert((*it)[1]);
    EXPECT_EQ(out.count(m[1]), 0u) << m[1] << " is listed twice";
    out[m[1]] = f;
  }
  return out;
}

std::map<std::string, Family> FamiliesOf(const std::string& text) {
  std::map<std::string, Family> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string name, type;
      words >> name >> type;
      out[name].type = type;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    std::string series = line.substr(0, line.find(' '));
    std::string name = series.substr(0, series.find('{'));
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      std::string s(suffix);
      if (out.count(name) == 0 && name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        name = name.substr(0, name.size() - s.size());
      }
    }
    std::regex label(R"(([a-zA-Z_][a-zA-Z0-9_]*)=")");
    for (std::sregex_iterator it(series.begin(), series.end(), label), end; it != end; ++it) {
      if ((*it)[1] != "le") out[name].labels.insert((*it)[1]);
    }
  }
  return out;
}

TEST(MetricsTable, EveryFamilyIsInDocsMetricsMdAndEveryRowIsAFamily) {
  Metrics m;
  m.AddQueue("default");
  size_t t = m.AddTemplate("default", 4);
  m.JobReceived();
  m.JobCompleted("default", "exit");
  m.JobRejected("bad_field");
  m.DeadLetter("bad_field");
  m.ObserveQueueWait(0.1);
  m.SetWorkers("ready", 1);
  m.RedisReconnect();
  m.SetRedisConnected(true);
  m.ObserveRedisCommand(0.001);
  m.RedisError();
  m.HeartbeatWritten(1);
  m.ObserveLoopLag(0.001);
  m.SetQueue(1, 2, 3);
  m.SetPool(t, 1, 1, 2, 0);
  m.PoolHit(t);
  m.PoolMiss(t);
  m.ObservePoolWait(t, 0.1);
  m.ObserveSandboxPrepare(t, 0.1);
  m.PoolRefillFailed(t, "keeper_lost");
  m.ObserveRunDuration(t, 0.1);
  m.ObserveScheduleToStart(t, 0.1);
  m.RecoveredJob(t, "retried");
  m.SetSessions("running", 1);
  m.SessionOp("exec", "ok", 0.1);
  m.ObserveSessionStart(0.1);
  m.SessionFileBytes(1);
  m.NetRefused("default", "policy", 1);
  m.NetSpoofed(1);
  m.NetDnsQuery("default", "allowed");

  std::map<std::string, Family> docs = TableOfDocs();
  std::map<std::string, Family> code = FamiliesOf(m.Serialize());
  ASSERT_FALSE(docs.empty()) << "no table rows in docs/METRICS.md";
  for (const auto& [name, f] : code) {
    auto it = docs.find(name);
    if (it == docs.end()) {
      ADD_FAILURE() << name << " is exported but not in docs/METRICS.md";
      continue;
    }
    EXPECT_EQ(it->second, f) << name << ": docs/METRICS.md says " << it->second << ", the registry has " << f;
  }
  for (const auto& [name, f] : docs) EXPECT_EQ(code.count(name), 1u) << name << " is in docs/METRICS.md but not exported";
}

}  // namespace
}  // namespace sandpool
