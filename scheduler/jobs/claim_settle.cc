#include "scheduler/jobs/claim_settle.h"

#include "common/log.h"

namespace sandpool {

void SettleClaim(JobLedger* ledger, JobLedger::Verdict v, const std::string& stream, const std::string& entry,
                 std::string_view lost_message, const std::function<void(JobError)>& answer) {
  switch (v) {
    case JobLedger::Verdict::kCancelled:
      answer(JobError{ErrorCode::kCancelled, "cancelled by a client before it started"});
      return;
    case JobLedger::Verdict::kLost:
      answer(JobError{ErrorCode::kWorkerLost, std::string(lost_message)});
      return;
    case JobLedger::Verdict::kDrop:
      LogDebug("dropping entry", {{"stream", stream}, {"entry", entry}});
      ledger->Ack(stream, entry);
      return;
    case JobLedger::Verdict::kUnknown:
      ledger->Drop(stream, entry);
      return;
    case JobLedger::Verdict::kFailed:
      ledger->Drop(stream, entry);
      answer(JobError{ErrorCode::kInternal, "Redis refused to claim this entry " +
                                                std::to_string(JobLedger::kMaxClaimErrors) +
                                                " times in a row (the daemon's log has its error): it did not run"});
      return;
    case JobLedger::Verdict::kRun:
      break;
  }
  LogError("SettleClaim called for a claim that runs", {{"entry", entry}});
}

Outcome OutcomeOfError(ErrorCode code) {
  switch (code) {
    case ErrorCode::kCancelled: return Outcome::kCancelled;
    case ErrorCode::kWorkerLost: return Outcome::kWorkerLost;
    default: return Outcome::kError;
  }
}

JobResult ErrorResult(std::string id, uint32_t attempt, JobError error) {
  JobResult r;
  r.id = std::move(id);
  r.attempt = attempt;
  r.outcome = OutcomeOfError(error.code);
  r.error = std::move(error);
  return r;
}

}  // namespace sandpool
