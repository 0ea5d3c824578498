#include "scheduler/outcome.h"

#include <signal.h>
#include <sys/wait.h>

#include <cstring>

#include "worker/stub_protocol.h"

namespace sandpool {

void FillOutcome(const ExitedMsg& ex, KillReason reason, JobResult* r) {
  r->exec_time_us = ex.exec_time_us;
  r->cpu_time_us = ex.cpu_time_us;
  r->peak_memory_bytes = ex.peak_memory_bytes;
  r->killed = reason != KillReason::kNone || ex.cpu_limit;
  if (ex.have_status) {
    if (WIFEXITED(ex.wait_status)) r->exit_code = WEXITSTATUS(ex.wait_status);
    if (WIFSIGNALED(ex.wait_status)) r->signal = WTERMSIG(ex.wait_status);
  }

  if (ex.exec_errno != 0) {
    r->outcome = Outcome::kError;
    bool jobs_fault = StubStageIsJobs(ex.exec_stage);
    r->error = JobError{jobs_fault ? ErrorCode::kExecFailed : ErrorCode::kSandboxFailed,
                        (jobs_fault ? "" : "could not start the job: ") + ex.exec_stage + ": " +
                            std::strerror(ex.exec_errno)};
    return;
  }
  switch (reason) {
    case KillReason::kTimeout:
      r->outcome = Outcome::kTimeout;
      r->timed_out = true;
      return;
    case KillReason::kCancel:
      r->outcome = Outcome::kCancelled;
      r->error = JobError{ErrorCode::kCancelled, "cancelled by a client"};
      return;
    case KillReason::kOutputLimit:
      r->outcome = Outcome::kOutputLimit;
      return;
    case KillReason::kShutdown:
      r->outcome = Outcome::kError;
      r->error = JobError{ErrorCode::kShutdown, "the daemon was stopped before the job ended"};
      return;
    case KillReason::kTakenOver:
      r->outcome = Outcome::kWorkerLost;
      r->error = JobError{ErrorCode::kWorkerLost, "another daemon took the job over"};
      return;
    case KillReason::kNone:
      break;
  }
  // The OOM killer acting is the cause even when the CPU-time limit fired first: reclaim at the
  // memory limit burns CPU that is charged to the job.
  if (ex.oom_kills > 0) {
    r->outcome = Outcome::kMemoryLimit;
    return;
  }
  if (ex.cpu_limit) {
    r->outcome = Outcome::kCpuLimit;
    return;
  }
  if (!ex.have_status) {
    // init itself died: only the OOM killer or a keeper failure does that.
    if (ex.oom_kills > 0) {
      r->outcome = Outcome::kMemoryLimit;
    } else {
      r->outcome = Outcome::kError;
      r->error = JobError{ErrorCode::kSandboxFailed, ex.started ? "the sandbox died during the job" : "the sandbox died before the job started"};
    }
    return;
  }
  if (r->signal) {
    int sig = *r->signal;
    if (sig == SIGSYS) r->outcome = Outcome::kSeccomp;
    else if (sig == SIGXCPU) r->outcome = Outcome::kCpuLimit;
    else if (sig == SIGXFSZ) r->outcome = Outcome::kDiskLimit;
    else if (sig == SIGKILL && ex.oom_kills > 0) r->outcome = Outcome::kMemoryLimit;
    else r->outcome = Outcome::kSignal;
    if (r->outcome == Outcome::kCpuLimit) r->killed = true;
    return;
  }
  int code = r->exit_code.value_or(0);
  // The OOM killer or the pids limit acting during the job is reported even when the main
  // process still exited 0 (a shell whose children were killed usually does): the output is
  // then incomplete, and the caller must know. exit_code keeps the code. A full disk only
  // counts when the job failed: filling /tmp exactly is not an error.
  if (ex.oom_kills > 0) r->outcome = Outcome::kMemoryLimit;
  else if (ex.pids_max_hits > 0) r->outcome = Outcome::kPidsLimit;
  else if (code != 0 && ex.disk_full) r->outcome = Outcome::kDiskLimit;
  else r->outcome = Outcome::kExit;
}

}  // namespace sandpool
