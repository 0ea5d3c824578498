#include "scheduler/jobs/outcome.h"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>

#include "worker/ipc/stub_protocol.h"

namespace sandpool {

void FillOutcome(const ExitedMsg& ex, KillReason reason, JobResult* r) {
  r->exec_time_us = ex.exec_time_us;
  r->cpu_time_us = ex.cpu_time_us;
  r->peak_memory_bytes = ex.peak_memory_bytes;
  if (ex.have_status) {
    if (WIFEXITED(ex.wait_status)) r->exit_code = WEXITSTATUS(ex.wait_status);
    if (WIFSIGNALED(ex.wait_status)) r->signal = WTERMSIG(ex.wait_status);
  }
  const bool xcpu = r->signal == SIGXCPU;
  // Killed: the daemon or its keeper ended the sandbox, or the kernel killed a process of the
  // job for a limit (the OOM killer, RLIMIT_CPU). The main process then died of SIGKILL unless
  // init saw it end first.
  r->killed = reason != KillReason::kNone || ex.killed || ex.cpu_limit || (ex.oom_kills > 0 || ex.memory_limit) || xcpu;
  if (r->killed && !ex.have_status) r->signal = SIGKILL;
  r->timed_out = reason == KillReason::kTimeout;

  // PROTOCOL.md section 5: the first outcome that applies, in this order.
  if (reason == KillReason::kCancel) {
    r->outcome = Outcome::kCancelled;
    r->error = JobError{ErrorCode::kCancelled, "cancelled by a client"};
    return;
  }
  if (ex.exec_errno != 0) {
    r->outcome = Outcome::kError;
    bool jobs_fault = StubStageIsJobs(ex.exec_stage);
    r->error = JobError{jobs_fault ? ErrorCode::kExecFailed : ErrorCode::kSandboxFailed,
                        (jobs_fault ? "" : "could not start the job: ") + ex.exec_stage + ": " +
                            std::strerror(ex.exec_errno)};
    // As a shell says it: 127 for a program that is not there, 126 for anything else (a
    // program that cannot be executed, a cwd that cannot be entered).
    if (jobs_fault) r->exit_code = ex.exec_stage == "exec" && ex.exec_errno == ENOENT ? 127 : 126;
    r->signal.reset();
    r->killed = false;
    return;
  }
  if (reason == KillReason::kShutdown) {
    r->outcome = Outcome::kError;
    r->error = JobError{ErrorCode::kShutdown, "the daemon was stopped before the job ended"};
    return;
  }
  if (reason == KillReason::kTakenOver) {
    r->outcome = Outcome::kWorkerLost;
    r->error = JobError{ErrorCode::kWorkerLost, "another daemon took the job over"};
    return;
  }
  if (!ex.have_status && reason == KillReason::kNone && !ex.cpu_limit && !(ex.oom_kills > 0 || ex.memory_limit)) {
    // init itself died and nobody killed it: a failure of the sandbox, not the job's.
    r->outcome = Outcome::kError;
    r->error = JobError{ErrorCode::kSandboxFailed,
                        ex.started ? "the sandbox died during the job" : "the sandbox died before the job started"};
    return;
  }
  if (reason == KillReason::kOutputLimit) r->outcome = Outcome::kOutputLimit;
  else if ((ex.oom_kills > 0 || ex.memory_limit)) r->outcome = Outcome::kMemoryLimit;
  else if (ex.pids_max_hits > 0) r->outcome = Outcome::kPidsLimit;
  else if (ex.cpu_limit || xcpu) r->outcome = Outcome::kCpuLimit;
  else if (reason == KillReason::kTimeout) r->outcome = Outcome::kTimeout;
  else if (r->signal == SIGSYS) r->outcome = Outcome::kSeccomp;
  else if (r->signal == SIGXFSZ || ex.disk_full) r->outcome = Outcome::kDiskLimit;
  else if (r->signal) r->outcome = Outcome::kSignal;
  else r->outcome = Outcome::kExit;
}

}  // namespace sandpool
