// What becomes of an entry whose claim did not say "run" (JobLedger::Verdict): the one path from
// a claim's verdict to a stored result, the same for jobs, one-shot jobs on snapshots and
// session operations.
//   kCancelled  answered: `cancelled`, before it started
//   kLost       answered: `worker_lost` (it was running when its daemon died, and no attempt
//               is left: never run twice)
//   kDrop       acked and deleted, nothing stored (a duplicate, or an id that has its result)
//   kUnknown    left pending: whether the claim happened is unknown (the reply was lost); the
//               own-pending scan after reconnecting claims it again, as the same attempt
//   kFailed     answered: `internal` (Redis refused its claim JobLedger::kMaxClaimErrors times
//               in a row; it never ran), stored by the REJECT script (job_ledger.h)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "queue/protocol.h"
#include "scheduler/jobs/job_ledger.h"

namespace sandpool {

// REQUIRES: v != kRun. `answer` gets the error to answer with, for kCancelled, kLost and kFailed, and
// stores the result in the form the entry needs; `lost_message` says what was lost.
void SettleClaim(JobLedger* ledger, JobLedger::Verdict v, const std::string& stream, const std::string& entry,
                 std::string_view lost_message, const std::function<void(JobError)>& answer);

// The outcome of a result that is only an error: cancelled, worker_lost, or error.
Outcome OutcomeOfError(ErrorCode code);
// A result that is only `error`.
JobResult ErrorResult(std::string id, uint32_t attempt, JobError error);

}  // namespace sandpool
