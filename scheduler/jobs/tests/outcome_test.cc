#include "scheduler/jobs/outcome.h"

#include <signal.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

namespace sandpool {
namespace {

ExitedMsg Exited(int code) {
  ExitedMsg m;
  m.have_status = true;
  m.started = true;
  m.wait_status = code << 8;  // as waitpid reports a normal exit
  return m;
}

ExitedMsg Signaled(int sig) {
  ExitedMsg m;
  m.have_status = true;
  m.started = true;
  m.wait_status = sig;
  return m;
}

JobResult Fill(const ExitedMsg& m, KillReason k = KillReason::kNone) {
  JobResult r;
  FillOutcome(m, k, &r);
  return r;
}

TEST(Outcome, NormalExitKeepsTheCode) {
  JobResult r = Fill(Exited(3));
  EXPECT_EQ(r.outcome, Outcome::kExit);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_FALSE(r.killed);
  EXPECT_FALSE(r.error.has_value());
}

TEST(Outcome, DaemonKillsSayWhy) {
  EXPECT_EQ(Fill(Signaled(SIGKILL), KillReason::kTimeout).outcome, Outcome::kTimeout);
  EXPECT_TRUE(Fill(Signaled(SIGKILL), KillReason::kTimeout).timed_out);
  EXPECT_EQ(Fill(Signaled(SIGKILL), KillReason::kCancel).error->code, ErrorCode::kCancelled);
  EXPECT_EQ(Fill(Signaled(SIGKILL), KillReason::kOutputLimit).outcome, Outcome::kOutputLimit);
  JobResult shutdown = Fill(Signaled(SIGKILL), KillReason::kShutdown);
  EXPECT_EQ(shutdown.error->code, ErrorCode::kShutdown);
  EXPECT_TRUE(ErrorCodeRetryable(shutdown.error->code));
}

TEST(Outcome, KernelLimitsAreNamed) {
  EXPECT_EQ(Fill(Signaled(SIGSYS)).outcome, Outcome::kSeccomp);
  EXPECT_EQ(Fill(Signaled(SIGXCPU)).outcome, Outcome::kCpuLimit);
  EXPECT_EQ(Fill(Signaled(SIGXFSZ)).outcome, Outcome::kDiskLimit);
  ExitedMsg oom = Signaled(SIGKILL);
  oom.oom_kills = 1;
  EXPECT_EQ(Fill(oom).outcome, Outcome::kMemoryLimit);
  ExitedMsg pids = Exited(2);
  pids.pids_max_hits = 4;
  EXPECT_EQ(Fill(pids).outcome, Outcome::kPidsLimit);
  ExitedMsg disk = Exited(1);
  disk.disk_full = true;
  EXPECT_EQ(Fill(disk).outcome, Outcome::kDiskLimit);
  // A kernel limit that acted is reported even if the main process exited 0; the code stays.
  ExitedMsg children_killed = Exited(0);
  children_killed.oom_kills = 2;
  EXPECT_EQ(Fill(children_killed).outcome, Outcome::kMemoryLimit);
  EXPECT_EQ(Fill(children_killed).exit_code, 0);
  // A full space at the end is disk_limit whatever the exit code (PROTOCOL.md section 5).
  ExitedMsg exact_fill = Exited(0);
  exact_fill.disk_full = true;
  EXPECT_EQ(Fill(exact_fill).outcome, Outcome::kDiskLimit);
  EXPECT_EQ(Fill(exact_fill).exit_code, 0);
  ExitedMsg cpu = Signaled(SIGKILL);
  cpu.cpu_limit = true;
  EXPECT_EQ(Fill(cpu).outcome, Outcome::kCpuLimit);
  cpu.oom_kills = 3;  // thrashing at the memory limit burned the CPU time
  EXPECT_EQ(Fill(cpu).outcome, Outcome::kMemoryLimit);
  EXPECT_EQ(Fill(Signaled(SIGTERM)).outcome, Outcome::kSignal);
  EXPECT_EQ(Fill(Signaled(SIGTERM)).signal, SIGTERM);
}

// The precedence of PROTOCOL.md section 5, and `killed` and `signal` as it defines them.
TEST(Outcome, PrecedenceKilledAndSignal) {
  // A fork bomb that ignores fork errors until its timeout: the limit it hit is the cause.
  ExitedMsg bomb;
  bomb.pids_max_hits = 1000;
  JobResult r = Fill(bomb, KillReason::kTimeout);
  EXPECT_EQ(r.outcome, Outcome::kPidsLimit);
  EXPECT_TRUE(r.timed_out);
  EXPECT_TRUE(r.killed);
  EXPECT_EQ(r.signal, SIGKILL);  // the daemon's kill ended it
  // Daemon kills report SIGKILL and killed; an OOM kill too; a pids limit alone kills nothing.
  for (KillReason k : {KillReason::kTimeout, KillReason::kCancel, KillReason::kOutputLimit, KillReason::kShutdown}) {
    JobResult killed = Fill(ExitedMsg(), k);
    EXPECT_TRUE(killed.killed);
    EXPECT_EQ(killed.signal, SIGKILL);
    EXPECT_FALSE(killed.exit_code.has_value());
  }
  ExitedMsg oom = Signaled(SIGKILL);
  oom.oom_kills = 1;
  EXPECT_TRUE(Fill(oom).killed);
  EXPECT_EQ(Fill(oom).signal, SIGKILL);
  ExitedMsg pids = Exited(1);
  pids.pids_max_hits = 1;
  EXPECT_FALSE(Fill(pids).killed);
  EXPECT_EQ(Fill(pids).exit_code, 1);
  ExitedMsg cpu;
  cpu.cpu_limit = true;
  EXPECT_TRUE(Fill(cpu).killed);
  EXPECT_EQ(Fill(cpu).signal, SIGKILL);
  EXPECT_TRUE(Fill(Signaled(SIGXCPU)).killed);
  // A cancel outranks everything; memory outranks the timeout it caused.
  EXPECT_EQ(Fill(oom, KillReason::kCancel).outcome, Outcome::kCancelled);
  EXPECT_EQ(Fill(oom, KillReason::kTimeout).outcome, Outcome::kMemoryLimit);
  // A job that ends on its own is not killed.
  EXPECT_FALSE(Fill(Signaled(SIGSEGV)).killed);
}

TEST(Outcome, ExecFailureAndLostSandbox) {
  ExitedMsg m = Exited(127);
  m.started = false;
  m.exec_errno = ENOENT;
  m.exec_stage = "exec";
  JobResult r = Fill(m);
  EXPECT_EQ(r.outcome, Outcome::kError);
  EXPECT_EQ(r.error->code, ErrorCode::kExecFailed);
  EXPECT_EQ(r.exit_code, 127);
  ExitedMsg gone;
  JobResult lost = Fill(gone);
  EXPECT_EQ(lost.error->code, ErrorCode::kSandboxFailed);
}

}  // namespace
}  // namespace sandpool
