// How a sandbox's end becomes a job outcome (PROTOCOL.md section 5). Pure function: the keeper's
// accounting plus why the daemon killed the sandbox (if it did) in, result fields out.
#pragma once

#include "queue/protocol.h"
#include "worker/ipc/messages.h"

namespace sandpool {

// kTakenOver: another daemon took the job's entry over (this one was presumed dead); the
// result made here is dropped.
enum class KillReason { kNone, kTimeout, kCancel, kOutputLimit, kShutdown, kTakenOver };

// Fills outcome, exit_code, signal, timed_out, killed, error, exec_time_us, cpu_time_us and
// peak_memory_bytes of `r` from the keeper's Exited message.
void FillOutcome(const ExitedMsg& ex, KillReason reason, JobResult* r);

}  // namespace sandpool
