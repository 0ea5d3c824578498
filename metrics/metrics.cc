#include "metrics/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/text_serializer.h>

#include <cmath>
#include <exception>
#include <map>
#include <optional>

#include "common/clock.h"
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

  completed_family_ = &BuildCounter()
                           .Name("sandpool_jobs_completed_total")
                           .Help("Jobs that ran (or were ended) with a result, by outcome and template")
                           .Register(registry_);
  recovered_family_ = &BuildCounter()
                           .Name("sandpool_jobs_recovered_total")
                           .Help("Jobs of a dead daemon run again (retried) or ended as worker_lost (lost), by "
                                 "template")
                           .Register(registry_);

  auto& rejected = BuildCounter()
                       .Name("sandpool_jobs_rejected_total")
                       .Help("Jobs refused before running because the entry was invalid, by "
                             "error code")
                       .Register(registry_);
  auto& dead = BuildCounter()
                   .Name("sandpool_dead_letters_total")
                   .Help("Rejected entries copied to the dead-letter stream, by error code")
                   .Register(registry_);
  for (size_t i = 0; i < kRejectCodes.size(); ++i) {
    rejected_[i] = &rejected.Add({{"code", std::string(kRejectCodes[i])}});
    dead_letters_[i] = &dead.Add({{"code", std::string(kRejectCodes[i])}});
  }

  queue_wait_ = &BuildHistogram()
                     .Name("sandpool_queue_wait_seconds")
                     .Help("Time from XADD (stream id) to the job being claimed")
                     .Register(registry_)
                     .Add({}, Buckets());

  auto& workers = BuildGauge()
                      .Name("sandpool_workers")
                      .Help("Pool slots by state")
                      .Register(registry_);
  for (size_t i = 0; i < kWorkerStates.size(); ++i) {
    workers_[i] = &workers.Add({{"state", std::string(kWorkerStates[i])}});
  }

  reconnects_ = &BuildCounter()
                     .Name("sandpool_redis_reconnects_total")
                     .Help("Redis connections re-established after a loss")
                     .Register(registry_)
                     .Add({});
  redis_up_ = &BuildGauge()
                   .Name("sandpool_redis_up")
                   .Help("1 while the Redis command connection is up")
                   .Register(registry_)
                   .Add({});
  redis_rtt_ = &BuildHistogram()
                    .Name("sandpool_redis_command_seconds")
                    .Help("Round trip of one command on the daemon's command connection (its _count is "
                          "the attempts counter of sandpool_redis_errors_total)")
                    .Register(registry_)
                    .Add({}, Buckets());
  redis_errors_ = &BuildCounter()
                       .Name("sandpool_redis_errors_total")
                       .Help("Error replies from Redis (expected ones, such as BUSYGROUP, left out)")
                       .Register(registry_)
                       .Add({});
  reads_carried_ = &BuildCounter()
                       .Name("sandpool_redis_reads_carried_total")
                       .Help("Queue reads (XREADGROUP) Redis ran inside a FINISH call, with no round trip of their own")
                       .Register(registry_)
                       .Add({});
  heartbeat_ok_ = &BuildGauge()
                       .Name("sandpool_heartbeat_last_success_timestamp_seconds")
                       .Help("Unix time at which Redis last stored this daemon's heartbeat record (0: never)")
                       .Register(registry_)
                       .Add({});
  loop_lag_ = &BuildHistogram()
                   .Name("sandpool_event_loop_lag_seconds")
                   .Help("How late a periodic timer of the daemon's event loop fired")
                   .Register(registry_)
                   .Add({}, Buckets());

  auto gauge = [this](const char* name, const char* help) { return &BuildGauge().Name(name).Help(help).Register(registry_); };
  auto counter = [this](const char* name, const char* help) { return &BuildCounter().Name(name).Help(help).Register(registry_); };
  auto histogram = [this](const char* name, const char* help) {
    return &BuildHistogram().Name(name).Help(help).Register(registry_);
  };
  ready_family_ = gauge("sandpool_pool_ready_sandboxes", "Sandboxes prepared and waiting for a job, by template");
  busy_family_ = gauge("sandpool_pool_busy_sandboxes", "Pool slots holding a job (running, or claimed), by template");
  total_family_ = gauge("sandpool_pool_sandboxes", "Pool slots of a template (ready, busy or being prepared)");
  max_family_ = gauge("sandpool_pool_max_sandboxes", "The most pool slots a template may have here (--max-workers)");
  waiting_family_ = gauge("sandpool_jobs_waiting", "Jobs read by this daemon waiting for a sandbox of their template");
  hits_family_ = counter("sandpool_pool_hits_total", "Jobs that found a ready sandbox of their template");
  misses_family_ = counter("sandpool_pool_misses_total", "Jobs that had to wait for a sandbox of their template");
  refill_family_ = counter("sandpool_pool_refill_failures_total",
                           "Sandbox preparations that failed, by template and reason (prepare_failed: the keeper "
                           "reported a failure; keeper_lost: the keeper died)");
  pool_wait_family_ = histogram("sandpool_pool_wait_seconds",
                                "Time a job waited for a ready sandbox of its template after it was read");
  prepare_family_ = histogram("sandpool_sandbox_prepare_seconds",
                              "Time for a keeper to prepare a fresh sandbox (the pool's refill, off the job's path)");
  run_family_ = histogram("sandpool_job_run_seconds", "Wall time from RUN to the sandbox's exit, by template");
  start_family_ = histogram("sandpool_job_schedule_to_start_seconds",
                            "Time from the first XADD to the job's process starting, by template");
  other_.name = std::string(kOtherTemplate);
  for (size_t i = 0; i < kOutcomes.size(); ++i) {
    other_.completed[i] = &completed_family_->Add({{"outcome", std::string(kOutcomes[i])}, {"template", other_.name}});
  }

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

void Metrics::JobCompleted(std::string_view template_name, std::string_view outcome) {
  recent_.Completed(IndexOf(kOutcomes, outcome) ? outcome : "error", MonotonicUs());
  if (!ok_) return;
  static constexpr size_t kError = 11;
  static_assert(kOutcomes[kError] == "error");
  const Template* t = &other_;
  for (const Template& c : templates_) {
    if (c.name == template_name) t = &c;
  }
  prometheus::Counter* c = t->completed[IndexOf(kOutcomes, outcome).value_or(kError)];
  if (c != nullptr) c->Increment();
}

void Metrics::JobRejected(std::string_view code) {
  if (!ok_) return;
  static constexpr size_t kOther = kRejectCodes.size() - 1;
  static_assert(kRejectCodes[kOther] == "other");
  rejected_[IndexOf(kRejectCodes, code).value_or(kOther)]->Increment();
}

void Metrics::DeadLetter(std::string_view code) {
  if (!ok_) return;
  dead_letters_[IndexOf(kRejectCodes, code).value_or(kRejectCodes.size() - 1)]->Increment();
}

void Metrics::ObserveQueueWait(double seconds) { Observe(queue_wait_, seconds); }

void Metrics::SetWorkers(std::string_view state, double n) {
  if (!ok_) return;
  if (auto i = IndexOf(kWorkerStates, state)) workers_[*i]->Set(n);
}

void Metrics::RedisReconnect() {
  if (ok_) reconnects_->Increment();
}

void Metrics::SetRedisConnected(bool up) {
  if (ok_) redis_up_->Set(up ? 1 : 0);
}

void Metrics::ObserveRedisCommand(double seconds) { Observe(redis_rtt_, seconds); }

void Metrics::ReadCarried() {
  if (ok_) reads_carried_->Increment();
}

void Metrics::RedisError() {
  if (ok_) redis_errors_->Increment();
}

void Metrics::HeartbeatWritten(double unix_seconds) {
  if (ok_) heartbeat_ok_->Set(unix_seconds);
}

void Metrics::ObserveLoopLag(double seconds) { Observe(loop_lag_, seconds); }

void Metrics::AddQueue(std::string_view name) {
  if (!ok_ || pending_ != nullptr) return;
  try {
    std::map<std::string, std::string> label = {{"queue", std::string(name)}};
    pending_ = &prometheus::BuildGauge()
                    .Name("sandpool_queue_pending_entries")
                    .Help("Entries delivered to the consumer group but not acknowledged (XINFO), over the queue's "
                          "streams")
                    .Register(registry_)
                    .Add(label);
    lag_ = &prometheus::BuildGauge()
                .Name("sandpool_queue_lag_entries")
                .Help("Entries in the queue's streams not yet delivered to the consumer group (XINFO)")
                .Register(registry_)
                .Add(label);
    oldest_ = &prometheus::BuildGauge()
                   .Name("sandpool_queue_oldest_waiting_seconds")
                   .Help("Age of the queue's oldest entry that no daemon has taken yet (0: none waits)")
                   .Register(registry_)
                   .Add(label);
  } catch (const std::exception& e) {
    LogError("metrics: cannot add queue series", {{"error", e.what()}});
    pending_ = lag_ = oldest_ = nullptr;
  }
}

void Metrics::SetQueue(double pending, double lag, double oldest_waiting_seconds) {
  if (!ok_ || pending_ == nullptr || lag_ == nullptr || oldest_ == nullptr) return;
  pending_->Set(pending);
  lag_->Set(lag);
  oldest_->Set(oldest_waiting_seconds);
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

size_t Metrics::AddTemplate(std::string_view name, double max_slots) {
  templates_.emplace_back();
  Template& t = templates_.back();
  t.name = std::string(name);
  if (!ok_) return templates_.size() - 1;
  try {
    std::map<std::string, std::string> label = {{"template", t.name}};
    for (size_t i = 0; i < kOutcomes.size(); ++i) {
      t.completed[i] = &completed_family_->Add({{"outcome", std::string(kOutcomes[i])}, {"template", t.name}});
    }
    for (size_t i = 0; i < kRecoveryActions.size(); ++i) {
      t.recovered[i] = &recovered_family_->Add({{"action", std::string(kRecoveryActions[i])}, {"template", t.name}});
    }
    for (size_t i = 0; i < kRefillFailures.size(); ++i) {
      t.refill_failures[i] = &refill_family_->Add({{"reason", std::string(kRefillFailures[i])}, {"template", t.name}});
    }
    t.ready = &ready_family_->Add(label);
    t.busy = &busy_family_->Add(label);
    t.total = &total_family_->Add(label);
    max_family_->Add(label).Set(max_slots);
    t.waiting = &waiting_family_->Add(label);
    t.hits = &hits_family_->Add(label);
    t.misses = &misses_family_->Add(label);
    t.wait = &pool_wait_family_->Add(label, Buckets());
    t.prepare = &prepare_family_->Add(label, Buckets());
    t.run = &run_family_->Add(label, Buckets());
    t.schedule_to_start = &start_family_->Add(label, Buckets());
  } catch (const std::exception& e) {
    LogError("metrics: cannot add template series", {{"error", e.what()}});
    std::string keep = t.name;
    t = Template{};
    t.name = keep;
  }
  return templates_.size() - 1;
}

const Metrics::Template* Metrics::Find(size_t t) const {
  return ok_ && t < templates_.size() ? &templates_[t] : nullptr;
}

void Metrics::SetPool(size_t t, double ready, double busy, double total, double waiting) {
  const Template* p = Find(t);
  if (p == nullptr || p->ready == nullptr) return;
  p->ready->Set(ready);
  p->busy->Set(busy);
  p->total->Set(total);
  p->waiting->Set(waiting);
}

void Metrics::PoolHit(size_t t) {
  if (const Template* p = Find(t); p && p->hits) p->hits->Increment();
}

void Metrics::PoolMiss(size_t t) {
  if (const Template* p = Find(t); p && p->misses) p->misses->Increment();
}

void Metrics::ObservePoolWait(size_t t, double seconds) {
  if (const Template* p = Find(t)) Observe(p->wait, seconds);
}

void Metrics::ObserveSandboxPrepare(size_t t, double seconds) {
  if (const Template* p = Find(t)) Observe(p->prepare, seconds);
}

void Metrics::PoolRefillFailed(size_t t, std::string_view reason) {
  const Template* p = Find(t);
  auto i = IndexOf(kRefillFailures, reason);
  if (p && i && p->refill_failures[*i]) p->refill_failures[*i]->Increment();
}

void Metrics::ObserveRunDuration(size_t t, double seconds) {
  if (std::isfinite(seconds) && seconds >= 0) recent_.Ran(seconds, MonotonicUs());
  if (const Template* p = Find(t)) Observe(p->run, seconds);
}

void Metrics::ObserveScheduleToStart(size_t t, double seconds) {
  if (std::isfinite(seconds) && seconds >= 0) recent_.Started(seconds, MonotonicUs());
  if (const Template* p = Find(t)) Observe(p->schedule_to_start, seconds);
}

void Metrics::RecoveredJob(size_t t, std::string_view action) {
  const Template* p = Find(t);
  auto i = IndexOf(kRecoveryActions, action);
  if (p && i && p->recovered[*i]) p->recovered[*i]->Increment();
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
