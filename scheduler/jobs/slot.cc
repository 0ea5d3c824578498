#include "scheduler/jobs/slot.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/clock.h"
#include "common/job_env.h"
#include "common/log.h"
#include "common/runtimes.h"
#include "common/syscalls.h"

namespace sandpool {
namespace {

// After the sandbox is gone its pipes reach EOF at once; this only guards against a writer we
// did not foresee keeping one open.
constexpr int kDrainMs = 2000;

}  // namespace

Slot::Slot(struct event_base* base, uint32_t index, uint32_t template_index, std::string runtime,
           std::vector<std::string> template_env, SlotHooks hooks)
    : base_(base), index_(index), template_index_(template_index), runtime_(std::move(runtime)),
      template_env_(std::move(template_env)), hooks_(std::move(hooks)) {
  timeout_ev_ = evtimer_new(base_, &Slot::OnTimeout, this);
  kill_answer_ev_ = evtimer_new(base_, &Slot::OnKillUnanswered, this);
}

Slot::~Slot() {
  Shutdown();
  event_free(timeout_ev_);
  event_free(kill_answer_ev_);
}

void Slot::AttachKeeper(UniqueFd channel, pid_t pid, UniqueFd pidfd) {
  keeper_pid_ = pid;
  keeper_pidfd_ = std::move(pidfd);
  channel_.Open(
      base_, std::move(channel), [this](Frame& f) { HandleFrame(f); },
      [this](const Status& why) { LoseKeeper(why.message()); });
}

void Slot::Shutdown() {
  channel_.Close();
  keeper_pidfd_.reset();
  ResetLaunch();
  DropSandbox();
  job_.reset();
  reserved_ = false;
}

void Slot::SendToKeeper(MsgType t, const std::string& payload) {
  // A failure means the keeper is gone; the channel reports that (LoseKeeper) from the loop.
  Status s = channel_.Send(static_cast<uint16_t>(t), payload);
  if (!s.ok()) LogWarn("keeper channel send failed", {{"slot", index_}, {"error", s.message()}});
}

void Slot::HandleFrame(Frame& f) {
  switch (static_cast<MsgType>(f.type)) {
    case MsgType::kReady:
      if (launched_) {
        deferred_ready_ = std::move(f);  // the current job's output is still draining
      } else {
        AcceptReady(f);
      }
      return;
    case MsgType::kFailed: {
      FailedMsg m;
      (void)Decode(f.payload, &m);
      if (!failing_) LogWarn("sandbox preparation failing", {{"slot", index_}, {"error", m.message}});
      failing_ = true;
      if (hooks_.on_prepare_failed) hooks_.on_prepare_failed(*this);
      return;
    }
    case MsgType::kStarted: {
      GenerationMsg m;
      if (Decode(f.payload, &m).ok() && m.generation == generation_ && launched_) NotifyStarted();
      return;
    }
    case MsgType::kExited: {
      ExitedMsg m;
      if (!Decode(f.payload, &m).ok() || m.generation != generation_) return;
      if (!launched_) {
        // The sandbox died while idle: the keeper prepares the next one.
        DropSandbox();
        return;
      }
      evtimer_del(kill_answer_ev_);
      if (!m.started && m.exec_errno == 0 && !started_notified_ && kill_ == KillReason::kNone &&
          RetryUnstarted("its sandbox ended before the job started")) {
        return;
      }
      exited_ = true;
      exited_msg_ = std::move(m);
      struct timeval tv = TimevalMs(kDrainMs);
      evtimer_add(timeout_ev_, &tv);
      MaybeFinish();
      return;
    }
    default:
      return;
  }
}

void Slot::AcceptReady(Frame& f) {
  ReadyMsg m;
  if (!Decode(f.payload, &m).ok() || f.fds.size() != 3) {
    LoseKeeper("malformed Ready");
    return;
  }
  generation_ = m.generation;
  stdin_ = std::move(f.fds[0]);
  pipes_[0] = std::move(f.fds[1]);
  pipes_[1] = std::move(f.fds[2]);
  sandbox_ready_ = true;
  failing_ = false;
  if (hooks_.on_prepared) hooks_.on_prepared(*this, static_cast<double>(m.prepare_us) / 1e6);
  if (job_) {
    Launch();  // a job was waiting for this sandbox
  } else if (!reserved_ && hooks_.on_ready) {
    hooks_.on_ready(*this);
  }
}

void Slot::NotifyStarted() {
  if (started_notified_) return;
  started_notified_ = true;
  if (hooks_.on_started) hooks_.on_started(*this);
}

void Slot::Reserve() { reserved_ = true; }

void Slot::Release() {
  reserved_ = false;
  if (ready() && hooks_.on_ready) hooks_.on_ready(*this);
}

void Slot::Start(SlotJob job) {
  reserved_ = false;
  job_ = std::move(job);
  sandbox_retries_ = 0;
  seq_ = 0;
  kill_ = KillReason::kNone;
  started_notified_ = false;
  if (sandbox_ready_) {
    Launch();
  } else {
    // The sandbox died between Ready and now; the job runs in the next one (AcceptReady), and
    // its timeout covers the wait.
    struct timeval tv = TimevalMs(static_cast<int64_t>(job_->spec.timeout_ms));
    evtimer_add(timeout_ev_, &tv);
  }
}

void Slot::Launch() {
  result_ = JobResult();
  result_.id = job_->spec.id;
  result_.attempt = job_->attempt;
  result_.queue_wait_us = job_->queue_wait_us;
  exited_ = false;
  launched_ = true;
  sandbox_ready_ = false;  // this sandbox is the job's now

  RunMsg run;
  run.generation = generation_;
  const JobSpec& spec = job_->spec;
  if (spec.shell) {
    run.kind = "shell";
    run.code = *spec.shell;
    run.argv = SourceArgv(*FindRuntime("sh"), *spec.shell);
  } else if (spec.code && spec.runtime == runtime_) {
    run.kind = "code";  // the slot's warm interpreter runs it
    run.code = *spec.code;
  } else if (spec.code) {
    // No warm interpreter for this runtime here: start one, as `python3 -c` & co. would (the
    // daemon refused code too long for that before claiming the job).
    run.kind = "argv";
    run.argv = SourceArgv(*FindRuntime(spec.runtime), *spec.code);
  } else {
    run.kind = "argv";
    run.argv = spec.argv;
  }
  run.env = JobEnvironment(spec.env, template_env_);
  run.cwd = spec.cwd;
  run.cpu_time_ms = job_->cpu_time_ms;
  run.memory_bytes = job_->memory_bytes;
  run.pids = job_->pids;
  SendToKeeper(MsgType::kRun, Encode(run));

  ProcessIo::Hooks io;
  io.on_output = [this](std::string_view stream, std::string_view data) {
    NotifyStarted();  // output can overtake the keeper's Started; events stay in order
    if (hooks_.on_output) hooks_.on_output(*this, stream, data);
  };
  io.on_cap = [this] { Kill(KillReason::kOutputLimit); };
  io.on_eof = [this] { MaybeFinish(); };
  io_.Start(base_, std::move(stdin_), std::move(pipes_[0]), std::move(pipes_[1]), spec.stdin_data,
            spec.max_output_bytes, false, false, std::move(io));
  struct timeval tv = TimevalMs(static_cast<int64_t>(spec.timeout_ms));
  evtimer_add(timeout_ev_, &tv);  // (re)armed: the wall timeout counts from here
}

// The job never started in the sandbox it was handed to: it runs in the slot's next one. False
// when it has had enough tries (the caller then ends it).
bool Slot::RetryUnstarted(const char* why) {
  if (sandbox_retries_ >= kMaxSandboxRetries) return false;
  ++sandbox_retries_;
  LogWarn("job did not start; it runs in the next sandbox",
          {{"slot", index_}, {"job", job_->spec.id}, {"why", why}, {"try", sandbox_retries_}});
  ResetLaunch();
  DropSandbox();
  struct timeval tv = TimevalMs(static_cast<int64_t>(job_->spec.timeout_ms));
  evtimer_add(timeout_ev_, &tv);  // covers the wait for the next sandbox
  if (deferred_ready_) {
    Frame ready = std::move(*deferred_ready_);
    deferred_ready_.reset();
    AcceptReady(ready);
  }
  return true;
}

void Slot::Kill(KillReason reason) {
  if (!job_ || kill_ != KillReason::kNone || exited_) return;
  kill_ = reason;
  if (!launched_) {
    // Waiting for a sandbox: nothing runs, so it ends now.
    FinishNow(ExitedMsg());
    return;
  }
  SendToKeeper(MsgType::kKill, Encode(GenerationMsg{generation_}));
  struct timeval tv = TimevalMs(kKillAnswerMs);
  evtimer_add(kill_answer_ev_, &tv);
}

void Slot::OnKillUnanswered(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<Slot*>(arg);
  if (!self->launched_ || self->exited_) return;
  LogError("keeper did not answer a kill; replacing it",
           {{"slot", self->index_}, {"pid", static_cast<int64_t>(self->keeper_pid_)},
            {"job", self->job_->spec.id}, {"waited_ms", kKillAnswerMs}});
  // Its sandboxes die with it (their inits' parent-death signal).
  if (self->keeper_pidfd_) sys::PidfdSendSignal(self->keeper_pidfd_.get(), SIGKILL);
  self->LoseKeeper("did not answer a kill within " + std::to_string(kKillAnswerMs) + " ms");
}

void Slot::OnTimeout(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<Slot*>(arg);
  if (!self->launched_) {
    if (self->job_) self->Kill(KillReason::kTimeout);  // still waiting for a sandbox
    return;
  }
  if (!self->exited_) {
    self->Kill(KillReason::kTimeout);
    return;
  }
  // Drain deadline passed: stop waiting for EOF.
  if (!self->io_.eof()) {
    LogWarn("job output pipe still open after the sandbox ended; closing it", {{"slot", self->index_}});
    self->io_.GiveUp();
  }
  self->MaybeFinish();
}

void Slot::MaybeFinish() {
  if (!launched_ || !exited_ || !io_.eof()) return;
  FinishNow(exited_msg_);
}

// Ends the job with `exited` as the keeper's account of its sandbox, and frees the slot.
void Slot::FinishNow(ExitedMsg exited) {
  if (!launched_) {
    // It never reached a sandbox: its result is only why it ends.
    result_ = JobResult();
    result_.id = job_->spec.id;
    result_.attempt = job_->attempt;
    result_.queue_wait_us = job_->queue_wait_us;
  }
  if (launched_) FoldOutput(std::move(io_.output()), &result_);
  FillOutcome(exited, kill_, &result_);
  if (result_.error && result_.error->code == ErrorCode::kExecFailed && !job_->spec.argv.empty() &&
      result_.error->message.rfind("exec:", 0) == 0) {
    result_.error->message = job_->spec.argv[0] + ": " + result_.error->message;
  }
  JobResult r = std::move(result_);
  SlotJob job = std::move(*job_);
  std::optional<Frame> ready = std::move(deferred_ready_);
  deferred_ready_.reset();
  ResetLaunch();
  job_.reset();
  if (hooks_.on_finished) hooks_.on_finished(*this, job, std::move(r));
  if (ready && has_keeper()) AcceptReady(*ready);
}

// Forgets the current sandbox (its pipes); the keeper prepares the next one.
void Slot::DropSandbox() {
  sandbox_ready_ = false;
  stdin_.reset();
  pipes_[0].reset();
  pipes_[1].reset();
}

void Slot::ResetLaunch() {
  evtimer_del(timeout_ev_);
  evtimer_del(kill_answer_ev_);
  io_.Stop();
  launched_ = false;
  exited_ = false;
}

void Slot::LoseKeeper(const std::string& why) {
  LogWarn("keeper lost", {{"slot", index_}, {"pid", static_cast<int64_t>(keeper_pid_)}, {"why", why}});
  channel_.Close();
  keeper_pidfd_.reset();
  deferred_ready_.reset();
  if (launched_) {
    bool retried = !started_notified_ && kill_ == KillReason::kNone && RetryUnstarted("its keeper died before the job started");
    if (!retried) {
      // The sandbox died with its keeper; end the job with what we have.
      ExitedMsg ex;
      ex.generation = generation_;
      ex.started = started_notified_;
      ex.killed = kill_ != KillReason::kNone;
      FinishNow(ex);
    }
  }
  DropSandbox();
  if (hooks_.on_keeper_lost) hooks_.on_keeper_lost(*this);
}

}  // namespace sandpool
