// Metrics: every Prometheus series sandpoold exports, in one registry.
//
// Conventions (Prometheus's naming practices, https://prometheus.io/docs/practices/naming/;
// docs/METRICS.md says them to operators): prefix `sandpool_`, base units in names, counters end
// in `_total`, histograms (never summaries) with buckets from 0.5 ms to 10 min, labels only from
// fixed sets (never a job id). sandpool_jobs_received_total is the attempts counter for the
// completed/rejected counters.
//
// Every family and every labelled series is created in the constructor and its pointer cached,
// so the hot-path calls below are a table lookup plus an atomic add (Family::Add never runs after
// construction). Label values outside the fixed sets are folded (see each method), so a buggy or
// hostile caller cannot grow the series count. Every family is listed, with its labels and
// meaning, in docs/METRICS.md; tests/integration/test_metrics_table.py fails when the two differ.
//
// Threading: meant to be called from the daemon's loop thread. The series themselves are atomic
// (prometheus-cpp), so a scrape from another thread would also be safe.
// Errors: prometheus-cpp reports bad names by throwing; the constructor catches that (it would be
// a programming error in this file) and logs it, and the object then records nothing and
// serializes to a comment line. No method throws.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "metrics/recent.h"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
}  // namespace prometheus

namespace sandpool {

class Metrics {
 public:
  // Fixed label sets, in the order their series are cached. kOutcomes matches queue's Outcome
  // (PROTOCOL.md section 5), kRejectCodes its decode errors (section 8).
  static constexpr std::array<std::string_view, 12> kOutcomes = {
      "exit",         "signal",     "timeout",   "cancelled",  "output_limit", "memory_limit",
      "pids_limit",   "cpu_limit",  "disk_limit", "seccomp",   "worker_lost",  "error"};
  // "other" collects codes not in this list (a newer daemon speaking to an older dashboard).
  static constexpr std::array<std::string_view, 5> kRejectCodes = {
      "bad_payload", "bad_version", "bad_field", "too_large", "other"};
  static constexpr std::array<std::string_view, 4> kWorkerStates = {"starting", "ready", "busy",
                                                                    "failed"};
  static constexpr std::array<std::string_view, 2> kRecoveryActions = {"retried", "lost"};
  static constexpr std::array<std::string_view, 2> kRefillFailures = {"prepare_failed", "keeper_lost"};
  // The `template` label of job series whose template is not a configured one (rejected jobs,
  // jobs on snapshot templates): snapshot names are made by users, so they never become labels.
  // Parentheses cannot occur in a template name.
  static constexpr std::string_view kOtherTemplate = "(other)";

  Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // sandpool_jobs_received_total: every stream entry read, valid or not.
  void JobReceived();
  // sandpool_jobs_completed_total{outcome,template}: an outcome not in kOutcomes counts as
  // "error"; a template not added with AddTemplate as kOtherTemplate (a name lookup, no Add).
  void JobCompleted(std::string_view template_name, std::string_view outcome);
  // sandpool_jobs_rejected_total{code}: a code not in kRejectCodes counts as "other".
  void JobRejected(std::string_view code);
  // sandpool_dead_letters_total{code}: a rejected entry copied to the dead-letter stream.
  void DeadLetter(std::string_view code);
  // Histograms, in seconds. Negative or NaN values are dropped (a clock bug, not a sample).
  void ObserveQueueWait(double seconds);      // sandpool_queue_wait_seconds
  // sandpool_workers{state}: an unknown state is ignored.
  void SetWorkers(std::string_view state, double n);
  // sandpool_redis_reconnects_total.
  void RedisReconnect();
  // sandpool_redis_up: 1 while the command connection is up.
  void SetRedisConnected(bool up);
  // sandpool_redis_command_seconds: one command's round trip (send to reply).
  void ObserveRedisCommand(double seconds);
  // sandpool_redis_errors_total: error replies (not lost connections: see reconnects).
  void RedisError();
  // sandpool_redis_reads_carried_total: queue reads Redis ran inside a FINISH call (no round trip
  // of their own: StreamReader::CarryRead), counted when the call's reply came.
  void ReadCarried();
  // sandpool_heartbeat_last_success_timestamp_seconds: Redis stored this daemon's record then.
  void HeartbeatWritten(double unix_seconds);
  // sandpool_event_loop_lag_seconds: how late a timer of the daemon's loop fired.
  void ObserveLoopLag(double seconds);

  // The queue this daemon reads (one per daemon: --queue). Creates the queue series; call once
  // at start-up, before SetQueue.
  void AddQueue(std::string_view name);
  // sandpool_queue_{pending,lag}_entries (XINFO GROUPS, summed over the queue's streams) and
  // sandpool_queue_oldest_waiting_seconds (the oldest entry no daemon has taken yet).
  void SetQueue(double pending, double lag, double oldest_waiting_seconds);

  // Per-template series. AddTemplate creates them (at start-up: never on the hot path) and
  // returns the index the other calls take. Templates come from the daemon's configuration, so
  // the label set is bounded. `max_slots`: the template's --max-workers.
  size_t AddTemplate(std::string_view name, double max_slots);
  // sandpool_pool_{ready_,busy_,}sandboxes and sandpool_jobs_waiting (jobs here waiting for a
  // sandbox of the template).
  void SetPool(size_t t, double ready, double busy, double total, double waiting);
  void PoolHit(size_t t);                              // sandpool_pool_hits_total
  void PoolMiss(size_t t);                             // sandpool_pool_misses_total
  void ObservePoolWait(size_t t, double seconds);      // sandpool_pool_wait_seconds
  void ObserveSandboxPrepare(size_t t, double seconds);  // sandpool_sandbox_prepare_seconds
  // sandpool_pool_refill_failures_total{template,reason}: reason not in kRefillFailures ignored.
  void PoolRefillFailed(size_t t, std::string_view reason);
  void ObserveRunDuration(size_t t, double seconds);     // sandpool_job_run_seconds
  void ObserveScheduleToStart(size_t t, double seconds); // sandpool_job_schedule_to_start_seconds
  // sandpool_jobs_recovered_total{action,template}: an unknown action is ignored.
  void RecoveredJob(size_t t, std::string_view action);

  // Sessions. Label values come from the daemon's own tables (operation names, error codes and
  // outcomes, states), so every set is bounded; series are made on first use.
  void SetSessions(std::string_view state, double n);                     // sandpool_sessions{state}
  // sandpool_session_ops_total{op,result} and sandpool_session_op_seconds{op}.
  void SessionOp(std::string_view op, std::string_view result, double seconds);
  void ObserveSessionStart(double seconds);  // sandpool_session_start_seconds (create or resume)
  void SessionFileBytes(uint64_t bytes);     // sandpool_session_file_request_bytes_total

  // Network templates. Labels come from the daemon's configuration (template names) and fixed
  // reasons (host, always, policy, limit), never from a job.
  // sandpool_net_connections_refused_total{template,reason}
  void NetRefused(std::string_view template_name, std::string_view reason, uint64_t n);
  void NetSpoofed(uint64_t n);  // sandpool_net_spoofed_packets_total
  // sandpool_net_dns_queries_total{template,result}: result is one of the resolver's fixed
  // outcomes (allowed, denied, nodata, rebinding, servfail, ratelimited, type, malformed).
  void NetDnsQuery(std::string_view template_name, std::string_view result);

  // The registry in Prometheus text format 0.0.4. Never throws; on an internal failure returns a
  // comment line saying so (the scrape then shows no series, which alerts on absence catch).
  std::string Serialize() const;

  // The last minute of jobs (for the heartbeat record): fed by JobCompleted,
  // ObserveScheduleToStart and ObserveRunDuration, so it counts exactly what the series count.
  RecentJobs& recent() { return recent_; }

  // For callers that add their own families. Keep the Metrics object alive as long as anything
  // holds a series from it.
  prometheus::Registry& registry() { return registry_; }

 private:
  bool Build();

  prometheus::Registry registry_;
  bool ok_ = false;  // false if construction failed; every method is then a no-op
  RecentJobs recent_;
  prometheus::Counter* received_ = nullptr;
  std::array<prometheus::Counter*, kRejectCodes.size()> rejected_{};
  std::array<prometheus::Counter*, kRejectCodes.size()> dead_letters_{};
  prometheus::Histogram* queue_wait_ = nullptr;
  std::array<prometheus::Gauge*, kWorkerStates.size()> workers_{};
  prometheus::Gauge* pending_ = nullptr;  // the queue series: null until AddQueue
  prometheus::Gauge* lag_ = nullptr;
  prometheus::Gauge* oldest_ = nullptr;
  prometheus::Counter* reconnects_ = nullptr;
  prometheus::Gauge* redis_up_ = nullptr;
  prometheus::Histogram* redis_rtt_ = nullptr;
  prometheus::Counter* redis_errors_ = nullptr;
  prometheus::Counter* reads_carried_ = nullptr;
  prometheus::Gauge* heartbeat_ok_ = nullptr;
  prometheus::Histogram* loop_lag_ = nullptr;
  // Families with a `template` label; their series are added by AddTemplate.
  prometheus::Family<prometheus::Counter>* completed_family_ = nullptr;
  prometheus::Family<prometheus::Counter>* recovered_family_ = nullptr;
  prometheus::Family<prometheus::Counter>* refill_family_ = nullptr;
  prometheus::Family<prometheus::Gauge>* ready_family_ = nullptr;
  prometheus::Family<prometheus::Gauge>* busy_family_ = nullptr;
  prometheus::Family<prometheus::Gauge>* total_family_ = nullptr;
  prometheus::Family<prometheus::Gauge>* max_family_ = nullptr;
  prometheus::Family<prometheus::Gauge>* waiting_family_ = nullptr;
  prometheus::Family<prometheus::Counter>* hits_family_ = nullptr;
  prometheus::Family<prometheus::Counter>* misses_family_ = nullptr;
  prometheus::Family<prometheus::Histogram>* pool_wait_family_ = nullptr;
  prometheus::Family<prometheus::Histogram>* prepare_family_ = nullptr;
  prometheus::Family<prometheus::Histogram>* run_family_ = nullptr;
  prometheus::Family<prometheus::Histogram>* start_family_ = nullptr;
  struct Template {
    std::string name;
    std::array<prometheus::Counter*, kOutcomes.size()> completed{};
    std::array<prometheus::Counter*, kRecoveryActions.size()> recovered{};
    std::array<prometheus::Counter*, kRefillFailures.size()> refill_failures{};
    prometheus::Gauge* ready = nullptr;
    prometheus::Gauge* busy = nullptr;
    prometheus::Gauge* total = nullptr;
    prometheus::Gauge* waiting = nullptr;
    prometheus::Counter* hits = nullptr;
    prometheus::Counter* misses = nullptr;
    prometheus::Histogram* wait = nullptr;
    prometheus::Histogram* prepare = nullptr;
    prometheus::Histogram* run = nullptr;
    prometheus::Histogram* schedule_to_start = nullptr;
  };
  const Template* Find(size_t t) const;
  Template other_;                 // kOtherTemplate: job outcomes only
  std::vector<Template> templates_;
  prometheus::Family<prometheus::Gauge>* sessions_ = nullptr;
  prometheus::Family<prometheus::Counter>* session_ops_ = nullptr;
  prometheus::Family<prometheus::Histogram>* session_op_seconds_ = nullptr;
  prometheus::Histogram* session_start_ = nullptr;
  prometheus::Counter* session_file_bytes_ = nullptr;
  prometheus::Family<prometheus::Counter>* net_refused_ = nullptr;
  prometheus::Counter* net_spoofed_ = nullptr;
  prometheus::Family<prometheus::Counter>* net_dns_ = nullptr;
};

}  // namespace sandpool
