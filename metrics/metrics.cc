#include <map>
#include "metrics/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/text_serializer.h>

#include <cmath>
#include <exception>
#include <optional>

#include "common/log.h"

#ifndef SANDPOOL_VERSION
#define SANDPOOL_VERSION "unknown"
#endif

namespace sandpool {
namespace {

// 0.5 ms (a warm sandbox hand-off) to 10 min (the longest job timeout), roughly 1-2.5-5 steps.
const prometheus::Histogram::BucketBoundaries& Buckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
      1,      2.5,   5,     10,    30,   60,    120,  300, 600};
  return kBuckets;
}

template <size_t N>
std::optional<size_t> IndexOf(const std::array<std::string_view, N>& set, std::string_view v) {
  for (size_t i = 0; i < N; ++i) {
    if (set[i] == v) return i;
  }
  return std::nullopt;
}

void Observe(prometheus::Histogram* h, double seconds) {
  // NaN would poison _sum forever; a negative duration is a clock bug, not a sample.
  if (h != nullptr && std::isfinite(seconds) && seconds >= 0) h->Observe(seconds);
}

}  // namespace

Metrics::Metrics() {
  try {
    ok_ = Build();
  } catch (const std::exception& e) {
    ok_ = false;
    LogError("metrics registry construction failed", {{"error", e.what()}});
  }
}

bool Metrics::Build() {
  using prometheus::BuildCounter;
  using prometheus::BuildGauge;
  using prometheus::BuildHistogram;

  received_ = &BuildCounter()
                   .Name("sandpool_jobs_received_total")
                   .Help("Stream entries read by this daemon, valid or not (the attempts counter "
                         "for completed and rejected jobs)")
                   .Register(registry_)
                   .Add({});

  auto& completed = BuildCounter()
                        .Name("sandpool_jobs_completed_total")
                        .Help("Jobs that ran (or were ended) with a result, by outcome")
                        .Register(registry_);
  for (size_t i = 0; i < kOutcomes.size(); ++i) {
    completed_[i] = &completed.Add({{"outcome", std::string(kOutcomes[i])}});
  }

  auto& rejected = BuildCounter()
                       .Name("sandpool_jobs_rejected_total")
                       .Help("Jobs refused before running because the entry was invalid, by "
                             "error code")
                       .Register(registry_);
  for (size_t i = 0; i < kRejectCodes.size(); ++i) {
    rejected_[i] = &rejected.Add({{"code", std::string(kRejectCodes[i])}});
  }

  queue_wait_ = &BuildHistogram()
                     .Name("sandpool_queue_wait_seconds")
                     .Help("Time from XADD (stream id) to the job being claimed")
                     .Register(registry_)
                     .Add({}, Buckets());
  run_ = &BuildHistogram()
              .Name("sandpool_job_run_seconds")
              .Help("Wall time from RUN to the sandbox's exit")
              .Register(registry_)
              .Add({}, Buckets());
  prepare_ = &BuildHistogram()
                  .Name("sandpool_sandbox_prepare_seconds")
                  .Help("Time for a keeper to prepare a fresh sandbox (off the job's path)")
                  .Register(registry_)
                  .Add({}, Buckets());

  auto& workers = BuildGauge()
                      .Name("sandpool_workers")
                      .Help("Pool slots by state")
                      .Register(registry_);
  for (size_t i = 0; i < kWorkerStates.size(); ++i) {
    workers_[i] = &workers.Add({{"state", std::string(kWorkerStates[i])}});
  }

  pending_ = &BuildGauge()
                  .Name("sandpool_queue_pending_entries")
                  .Help("Entries delivered to the consumer group but not acknowledged (XINFO)")
                  .Register(registry_)
                  .Add({});
  lag_ = &BuildGauge()
              .Name("sandpool_queue_lag_entries")
              .Help("Entries in the stream not yet delivered to the consumer group (XINFO)")
              .Register(registry_)
              .Add({});

  reconnects_ = &BuildCounter()
                     .Name("sandpool_redis_reconnects_total")
                     .Help("Redis connections re-established after a loss")
                     .Register(registry_)
                     .Add({});

  auto& recovered = BuildCounter()
                        .Name("sandpool_jobs_recovered_total")
                        .Help("Pending jobs of a dead consumer taken over, by what was done")
                        .Register(registry_);
  for (size_t i = 0; i < kRecoveryActions.size(); ++i) {
    recovered_[i] = &recovered.Add({{"action", std::string(kRecoveryActions[i])}});
  }

  redis_up_ = &BuildGauge()
                   .Name("sandpool_redis_up")
                   .Help("1 while the Redis command connection is up")
                   .Register(registry_)
                   .Add({});

  sessions_ = &BuildGauge().Name("sandpool_sessions").Help("Sessions held by this daemon, by state").Register(registry_);
  session_ops_ = &BuildCounter()
                      .Name("sandpool_session_ops_total")
                      .Help("Session operations answered, by operation and result (ok, an error code, or a command's outcome)")
                      .Register(registry_);
  session_op_seconds_ = &BuildHistogram()
                             .Name("sandpool_session_op_seconds")
                             .Help("Time from reading a session operation to its answer, by operation")
                             .Register(registry_);
  session_start_ = &BuildHistogram()
                        .Name("sandpool_session_start_seconds")
                        .Help("Time to start a session's sandbox (a create or a resume), disk included")
                        .Register(registry_)
                        .Add({}, Buckets());
  session_file_bytes_ = &BuildCounter()
                             .Name("sandpool_session_file_request_bytes_total")
                             .Help("Bytes of file-operation requests handed to session agents")
                             .Register(registry_)
                             .Add({});
  net_refused_ = &BuildCounter()
                      .Name("sandpool_net_connections_refused_total")
                      .Help("Connections (new flows) a network sandbox tried and its egress policy refused, by template and "
                            "reason: host (an address of the host), always (never allowed), policy, limit")
                      .Register(registry_);
  net_spoofed_ = &BuildCounter()
                      .Name("sandpool_net_spoofed_packets_total")
                      .Help("Packets from a sandbox with a source address not its own, or IPv6: dropped")
                      .Register(registry_)
                      .Add({});
  net_dns_ = &BuildCounter()
                  .Name("sandpool_net_dns_queries_total")
                  .Help("DNS questions from network sandboxes, by template and result (allowed, denied, nodata, rebinding, "
                        "servfail, ratelimited, type, malformed)")
                  .Register(registry_);

  BuildGauge()
      .Name("sandpool_build_info")
      .Help("Always 1; the labels say which build is running")
      .Register(registry_)
      .Add({{"version", SANDPOOL_VERSION}})
      .Set(1);
  return true;
}

void Metrics::JobReceived() {
  if (ok_) received_->Increment();
}

void Metrics::JobCompleted(std::string_view outcome) {
  if (!ok_) return;
  static constexpr size_t kError = 11;
  static_assert(kOutcomes[kError] == "error");
  completed_[IndexOf(kOutcomes, outcome).value_or(kError)]->Increment();
}

void Metrics::JobRejected(std::string_view code) {
  if (!ok_) return;
  static constexpr size_t kOther = kRejectCodes.size() - 1;
  static_assert(kRejectCodes[kOther] == "other");
  rejected_[IndexOf(kRejectCodes, code).value_or(kOther)]->Increment();
}

void Metrics::ObserveQueueWait(double seconds) { Observe(queue_wait_, seconds); }
void Metrics::ObserveRunDuration(double seconds) { Observe(run_, seconds); }
void Metrics::ObserveSandboxPrepare(double seconds) { Observe(prepare_, seconds); }

void Metrics::SetWorkers(std::string_view state, double n) {
  if (!ok_) return;
  if (auto i = IndexOf(kWorkerStates, state)) workers_[*i]->Set(n);
}

void Metrics::SetQueueDepth(double pending, double lag) {
  if (!ok_) return;
  pending_->Set(pending);
  lag_->Set(lag);
}

void Metrics::RedisReconnect() {
  if (ok_) reconnects_->Increment();
}

void Metrics::RecoveredJob(std::string_view action) {
  if (!ok_) return;
  if (auto i = IndexOf(kRecoveryActions, action)) recovered_[*i]->Increment();
}

void Metrics::SetRedisConnected(bool up) {
  if (ok_) redis_up_->Set(up ? 1 : 0);
}

std::string Metrics::Serialize() const {
  if (!ok_) return "# sandpool metrics unavailable: registry construction failed\n";
  try {
    return prometheus::TextSerializer().Serialize(registry_.Collect());
  } catch (const std::exception& e) {
    LogError("metrics serialization failed", {{"error", e.what()}});
    return "# sandpool metrics serialization failed\n";
  }
}

}  // namespace sandpool

namespace sandpool {

size_t Metrics::AddTemplate(std::string_view name) {
  if (!ok_) return 0;
  try {
    std::map<std::string, std::string> label = {{"template", std::string(name)}};
    Pool p;
    p.ready = &prometheus::BuildGauge()
                   .Name("sandpool_pool_ready_sandboxes")
                   .Help("Sandboxes prepared and waiting for a job, by template")
                   .Register(registry_)
                   .Add(label);
    p.total = &prometheus::BuildGauge()
                   .Name("sandpool_pool_sandboxes")
                   .Help("Pool slots of a template (ready, busy or being prepared)")
                   .Register(registry_)
                   .Add(label);
    p.hits = &prometheus::BuildCounter()
                  .Name("sandpool_pool_hits_total")
                  .Help("Jobs that found a ready sandbox of their template")
                  .Register(registry_)
                  .Add(label);
    p.misses = &prometheus::BuildCounter()
                    .Name("sandpool_pool_misses_total")
                    .Help("Jobs that had to wait for a sandbox of their template")
                    .Register(registry_)
                    .Add(label);
    p.wait = &prometheus::BuildHistogram()
                  .Name("sandpool_pool_wait_seconds")
                  .Help("Time a job waited for a ready sandbox of its template after it was read")
                  .Register(registry_)
                  .Add(label, Buckets());
    pools_.push_back(p);
  } catch (const std::exception& e) {
    LogError("metrics: cannot add template series", {{"error", e.what()}});
    pools_.push_back(Pool{});
  }
  return pools_.size() - 1;
}

void Metrics::SetPool(size_t t, double ready, double total) {
  if (t >= pools_.size() || pools_[t].ready == nullptr) return;
  pools_[t].ready->Set(ready);
  pools_[t].total->Set(total);
}

void Metrics::PoolHit(size_t t) {
  if (t < pools_.size() && pools_[t].hits) pools_[t].hits->Increment();
}

void Metrics::PoolMiss(size_t t) {
  if (t < pools_.size() && pools_[t].misses) pools_[t].misses->Increment();
}

void Metrics::ObservePoolWait(size_t t, double seconds) {
  if (t < pools_.size() && pools_[t].wait) pools_[t].wait->Observe(seconds);
}

void Metrics::SetSessions(std::string_view state, double n) {
  if (ok_) sessions_->Add({{"state", std::string(state)}}).Set(n);
}

void Metrics::SessionOp(std::string_view op, std::string_view result, double seconds) {
  if (!ok_) return;
  session_ops_->Add({{"op", std::string(op)}, {"result", std::string(result)}}).Increment();
  if (seconds > 0) session_op_seconds_->Add({{"op", std::string(op)}}, Buckets()).Observe(seconds);
}

void Metrics::ObserveSessionStart(double seconds) { Observe(session_start_, seconds); }

void Metrics::SessionFileBytes(uint64_t bytes) {
  if (ok_) session_file_bytes_->Increment(static_cast<double>(bytes));
}

void Metrics::NetRefused(std::string_view template_name, std::string_view reason, uint64_t n) {
  if (ok_) net_refused_->Add({{"template", std::string(template_name)}, {"reason", std::string(reason)}}).Increment(static_cast<double>(n));
}

void Metrics::NetDnsQuery(std::string_view template_name, std::string_view result) {
  if (ok_) net_dns_->Add({{"template", std::string(template_name)}, {"result", std::string(result)}}).Increment();
}

void Metrics::NetSpoofed(uint64_t n) {
  if (ok_) net_spoofed_->Increment(static_cast<double>(n));
}

}  // namespace sandpool
