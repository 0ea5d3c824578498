// What every daemon does for its peers' sessions (PROTOCOL.md section 14, "Failure handling" in
// docs/ARCHITECTURE.md), every heartbeat:
//  - a daemon holding sessions that is gone (no connection of its left, Redis up for a lease:
//    liveness.h) has its sessions marked `lost` (SESSION_LOSE); the operations it had taken and
//    not answered end `worker_lost` (they may have half happened), and those sent to it since
//    end `session_lost`, except a destroy, which is done (the record goes; the files go when the
//    host returns and finds the record destroyed);
//  - a create nobody had room for within its wait_ms is answered `host_full` (SESSION_EXPIRE).
// Any daemon may do either: each step is a script or a claim, so two peers doing it at once do
// it once.
//
// Ownership: Sessions owns it; everything it points to outlives it. Loop thread only.
#pragma once

#include <string>

#include "queue/keys.h"
#include "queue/session_protocol.h"
#include "scheduler/config/config.h"
#include "scheduler/jobs/job_ledger.h"
#include "scheduler/redis/redis_async.h"
#include "scheduler/sessions/op_answers.h"
#include "scheduler/sessions/session_registry.h"

namespace sandpool {

class LostHosts {
 public:
  LostHosts(RedisAsync* cmd, const Keys& keys, const DaemonConfig& config, const SessionLimits& limits,
            JobLedger* ledger, SessionRegistry* registry, OpAnswers* answers)
      : cmd_(cmd), keys_(keys), config_(config), limits_(limits), ledger_(ledger), registry_(registry),
        answers_(answers) {}

  // Looks for gone hosts and answers for them; expires creates nobody had room for.
  void Heartbeat();

 private:
  void FindLostHosts();
  void AnswerLostHost(const std::string& consumer);
  void ExpireCreates();

  RedisAsync* cmd_;
  const Keys& keys_;
  const DaemonConfig& config_;
  const SessionLimits& limits_;
  JobLedger* ledger_;
  SessionRegistry* registry_;
  OpAnswers* answers_;
};

}  // namespace sandpool
