// How a session operation is answered (PROTOCOL.md sections 16-17): its result stored and its
// `exited` event published through the job ledger, in the form its op takes: a command (exec,
// code) ends with a job's result, every other op with an operation result. Also answers entries
// that were never claimed (undecodable, another daemon's, a lost host's) in the form their op
// needs, as far as it can be read.
//
// Ownership: Sessions owns it; the ledger and metrics outlive it. Loop thread only.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "metrics/metrics.h"
#include "queue/session_protocol.h"
#include "scheduler/config/config.h"
#include "scheduler/jobs/job_ledger.h"
#include "scheduler/sessions/session.h"

namespace sandpool {

// An operation read from this daemon's session stream, claimed (or being claimed).
struct SessionOpEntry {
  std::string stream, entry;
  SessionRequest req;
  uint32_t attempt = 1;
  int64_t received_us = 0;
};

// exec and code run a command: their answers are job results.
bool IsCommandOp(SessionOp op);

class OpAnswers {
 public:
  OpAnswers(const DaemonConfig& config, JobLedger* ledger, Metrics* metrics)
      : config_(config), ledger_(ledger), metrics_(metrics) {}

  // A claimed op's answer. The agent's value comes from inside the sandbox: unless it is one
  // msgpack map it is not put into a result (the op ends with `internal`).
  void Op(const SessionOpEntry& op, OpAnswer answer);
  // A claimed command's result (`seq`: the sequence of its last event).
  void Command(const SessionOpEntry& op, JobResult&& r, uint64_t seq);
  // A claimed op ended with an error, in its op's form.
  void Error(const SessionOpEntry& op, ErrorCode code, std::string message);
  // An entry answered without a claim: with `code`, in the form its op needs (read from its
  // fields as far as they can be), under its id (or "entry-<entry>" when it has none).
  void Entry(const std::string& stream, const std::string& entry, const std::map<std::string, std::string>& fields,
             ErrorCode code, const std::string& message);

 private:
  const DaemonConfig& config_;
  JobLedger* ledger_;
  Metrics* metrics_;
};

}  // namespace sandpool
