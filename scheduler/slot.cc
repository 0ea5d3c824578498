#include "scheduler/slot.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "common/runtimes.h"

namespace sandpool {
namespace {

constexpr size_t kChunk = 65536;
// After the sandbox is gone its pipes reach EOF at once; this only guards against a writer we
// did not foresee keeping one open.
constexpr int kDrainMs = 2000;
const char* const kStreamName[2] = {"stdout", "stderr"};

// The job's environment: its own variables, then the template's it did not set, then the safe
// defaults it did not set.
std::vector<std::string> JobEnv(const JobSpec& spec, const std::vector<std::string>& template_env) {
  std::vector<std::string> env;
  bool path = false, home = false, lang = false;
  auto has = [&](const std::string& name) {
    for (const auto& [k, v] : spec.env) {
      if (k == name) return true;
    }
    return false;
  };
  for (const auto& [k, v] : spec.env) {
    env.push_back(k + "=" + v);
    path |= k == "PATH";
    home |= k == "HOME";
    lang |= k == "LANG";
  }
  for (const std::string& e : template_env) {
    std::string name = e.substr(0, e.find('='));
    if (has(name)) continue;
    env.push_back(e);
    path |= name == "PATH";
    home |= name == "HOME";
    lang |= name == "LANG";
  }
  if (!path) env.emplace_back("PATH=/usr/local/bin:/usr/bin:/bin");
  if (!home) env.emplace_back("HOME=/work");
  if (!lang) env.emplace_back("LANG=C.UTF-8");
  return env;
}

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
  state_ = State::kPreparing;
}

void Slot::Shutdown() {
  channel_.Close();
  keeper_pidfd_.reset();
  ResetJob();
  state_ = State::kNoKeeper;
}

void Slot::SendToKeeper(MsgType t, const std::string& payload) {
  // A failure means the keeper is gone; the channel reports that (LoseKeeper) from the loop.
  Status s = channel_.Send(static_cast<uint16_t>(t), payload);
  if (!s.ok()) LogWarn("keeper channel send failed", {{"slot", index_}, {"error", s.message()}});
}

void Slot::HandleFrame(Frame& f) {
  switch (static_cast<MsgType>(f.type)) {
    case MsgType::kReady:
      if (state_ == State::kRunning) {
        deferred_ready_ = std::move(f);
      } else {
        AcceptReady(f);
      }
      return;
    case MsgType::kFailed: {
      FailedMsg m;
      (void)Decode(f.payload, &m);
      if (!failing_) LogWarn("sandbox preparation failing", {{"slot", index_}, {"error", m.message}});
      failing_ = true;
      return;
    }
    case MsgType::kStarted: {
      GenerationMsg m;
      if (Decode(f.payload, &m).ok() && m.generation == generation_ && state_ == State::kRunning) {
        NotifyStarted();
      }
      return;
    }
    case MsgType::kExited: {
      ExitedMsg m;
      if (!Decode(f.payload, &m).ok() || m.generation != generation_) return;
      if (state_ == State::kRunning) {
        evtimer_del(kill_answer_ev_);
        exited_ = true;
        exited_msg_ = std::move(m);
        struct timeval tv = {kDrainMs / 1000, (kDrainMs % 1000) * 1000};
        evtimer_add(timeout_ev_, &tv);
        MaybeFinish();
      } else {
        // The sandbox died while idle (or reserved): drop its pipes; the keeper prepares the
        // next one. A reserved slot notices at Start().
        stdin_.reset();
        pipes_[0].reset();
        pipes_[1].reset();
        if (state_ == State::kReady) state_ = State::kPreparing;
      }
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
  for (int i = 0; i < 2; ++i) (void)SetNonBlocking(pipes_[i].get());
  (void)SetNonBlocking(stdin_.get());
  failing_ = false;
  if (hooks_.on_prepared) hooks_.on_prepared(*this, static_cast<double>(m.prepare_us) / 1e6);
  if (state_ == State::kPreparing) {
    state_ = State::kReady;
    if (hooks_.on_ready) hooks_.on_ready(*this);
  }
}

void Slot::NotifyStarted() {
  if (started_notified_) return;
  started_notified_ = true;
  if (hooks_.on_started) hooks_.on_started(*this);
}

void Slot::Reserve() { state_ = State::kReserved; }

void Slot::Release() {
  if (state_ != State::kReserved) return;
  if (pipes_[0].valid()) {
    state_ = State::kReady;
    if (hooks_.on_ready) hooks_.on_ready(*this);
  } else {
    state_ = State::kPreparing;
  }
}

void Slot::Start(SlotJob job) {
  state_ = State::kRunning;
  job_ = std::move(job);
  last_entry_ = job_->entry;
  result_ = JobResult();
  result_.id = job_->spec.id;
  result_.attempt = job_->attempt;
  result_.queue_wait_us = job_->queue_wait_us;
  seq_ = 0;
  kill_ = KillReason::kNone;
  exited_ = false;
  started_notified_ = false;
  eof_[0] = eof_[1] = false;
  stdin_off_ = 0;
  if (!pipes_[0].valid()) {
    // The sandbox died between Ready and now.
    exited_ = eof_[0] = eof_[1] = true;
    exited_msg_ = ExitedMsg();
    MaybeFinish();
    return;
  }

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
  run.env = JobEnv(spec, template_env_);
  run.cwd = job_->spec.cwd;
  run.cpu_time_ms = job_->cpu_time_ms;
  run.memory_bytes = job_->memory_bytes;
  run.pids = job_->pids;
  SendToKeeper(MsgType::kRun, Encode(run));

  for (int i = 0; i < 2; ++i) {
    pipe_ev_[i] = event_new(base_, pipes_[i].get(), EV_READ | EV_PERSIST, &Slot::OnPipe, this);
    event_add(pipe_ev_[i], nullptr);
  }
  if (job_->spec.stdin_data.empty()) {
    stdin_.reset();
  } else {
    stdin_ev_ = event_new(base_, stdin_.get(), EV_WRITE | EV_PERSIST, &Slot::OnStdin, this);
    WriteStdin();
  }
  uint64_t ms = job_->spec.timeout_ms;
  struct timeval tv = {static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
  evtimer_add(timeout_ev_, &tv);
}

void Slot::WriteStdin() {
  const std::string& data = job_->spec.stdin_data;
  while (stdin_off_ < data.size()) {
    ssize_t n = ::write(stdin_.get(), data.data() + stdin_off_, data.size() - stdin_off_);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        event_add(stdin_ev_, nullptr);
        return;
      }
      break;  // EPIPE: the job closed its stdin; the rest is dropped
    }
    stdin_off_ += static_cast<size_t>(n);
  }
  if (stdin_ev_ != nullptr) {
    event_free(stdin_ev_);
    stdin_ev_ = nullptr;
  }
  stdin_.reset();
}

void Slot::OnStdin(evutil_socket_t, short, void* arg) { static_cast<Slot*>(arg)->WriteStdin(); }

void Slot::OnPipe(evutil_socket_t fd, short, void* arg) {
  auto* self = static_cast<Slot*>(arg);
  self->ReadPipe(fd == self->pipes_[0].get() ? 0 : 1);
}

void Slot::ReadPipe(int which) {
  std::string& kept = which == 0 ? result_.stdout_data : result_.stderr_data;
  uint64_t& dropped = which == 0 ? result_.stdout_dropped_bytes : result_.stderr_dropped_bytes;
  bool& truncated = which == 0 ? result_.stdout_truncated : result_.stderr_truncated;
  const uint64_t cap = job_->spec.max_output_bytes;
  char buf[kChunk];
  // Bounded work per callback, so one flooding job cannot starve the loop.
  for (int round = 0; round < 4; ++round) {
    ssize_t n = ::read(pipes_[which].get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      eof_[which] = true;
      event_free(pipe_ev_[which]);
      pipe_ev_[which] = nullptr;
      pipes_[which].reset();
      MaybeFinish();
      return;
    }
    size_t len = static_cast<size_t>(n);
    size_t room = kept.size() < cap ? static_cast<size_t>(cap - kept.size()) : 0;
    size_t keep = std::min(len, room);
    if (keep > 0) {
      NotifyStarted();  // output can overtake the keeper's Started; events stay in order
      kept.append(buf, keep);
      if (hooks_.on_output) hooks_.on_output(*this, kStreamName[which], std::string_view(buf, keep));
    }
    if (keep < len) {
      dropped += len - keep;
      truncated = true;
      Kill(KillReason::kOutputLimit);
    }
  }
}

void Slot::Kill(KillReason reason) {
  if (state_ != State::kRunning || kill_ != KillReason::kNone || exited_) return;
  kill_ = reason;
  SendToKeeper(MsgType::kKill, Encode(GenerationMsg{generation_}));
  struct timeval tv = {kKillAnswerMs / 1000, (kKillAnswerMs % 1000) * 1000};
  evtimer_add(kill_answer_ev_, &tv);
}

void Slot::OnKillUnanswered(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<Slot*>(arg);
  if (self->state_ != State::kRunning || self->exited_) return;
  LogError("keeper did not answer a kill; replacing it",
           {{"slot", self->index_}, {"pid", static_cast<int64_t>(self->keeper_pid_)},
            {"job", self->job_->spec.id}, {"waited_ms", kKillAnswerMs}});
  // Its sandboxes die with it (their inits' parent-death signal).
  if (self->keeper_pidfd_) ::syscall(SYS_pidfd_send_signal, self->keeper_pidfd_.get(), SIGKILL, nullptr, 0);
  self->LoseKeeper("did not answer a kill within " + std::to_string(kKillAnswerMs) + " ms");
}

void Slot::OnTimeout(evutil_socket_t, short, void* arg) {
  auto* self = static_cast<Slot*>(arg);
  if (self->state_ != State::kRunning) return;
  if (!self->exited_) {
    self->Kill(KillReason::kTimeout);
    return;
  }
  // Drain deadline passed: stop waiting for EOF.
  for (int i = 0; i < 2; ++i) {
    if (!self->eof_[i]) {
      LogWarn("job output pipe still open after the sandbox ended; closing it", {{"slot", self->index_}});
      self->eof_[i] = true;
      if (self->pipe_ev_[i]) event_free(self->pipe_ev_[i]);
      self->pipe_ev_[i] = nullptr;
      self->pipes_[i].reset();
    }
  }
  self->MaybeFinish();
}

void Slot::MaybeFinish() {
  if (state_ != State::kRunning || !exited_ || !eof_[0] || !eof_[1]) return;
  FillOutcome(exited_msg_, kill_, &result_);
  if (result_.error && result_.error->code == ErrorCode::kExecFailed && !job_->spec.argv.empty() &&
      result_.error->message.rfind("exec:", 0) == 0) {
    result_.error->message = job_->spec.argv[0] + ": " + result_.error->message;
  }
  JobResult r = std::move(result_);
  std::optional<Frame> ready = std::move(deferred_ready_);
  ResetJob();
  state_ = channel_.open() ? State::kPreparing : State::kNoKeeper;
  if (hooks_.on_finished) hooks_.on_finished(*this, std::move(r));
  if (ready && state_ == State::kPreparing) AcceptReady(*ready);
}

void Slot::ResetJob() {
  evtimer_del(timeout_ev_);
  evtimer_del(kill_answer_ev_);
  for (int i = 0; i < 2; ++i) {
    if (pipe_ev_[i] != nullptr) event_free(pipe_ev_[i]);
    pipe_ev_[i] = nullptr;
    pipes_[i].reset();
  }
  if (stdin_ev_ != nullptr) event_free(stdin_ev_);
  stdin_ev_ = nullptr;
  stdin_.reset();
  job_.reset();
  exited_ = false;
  kill_ = KillReason::kNone;
  deferred_ready_.reset();
}

void Slot::LoseKeeper(const std::string& why) {
  LogWarn("keeper lost", {{"slot", index_}, {"pid", static_cast<int64_t>(keeper_pid_)}, {"why", why}});
  channel_.Close();
  keeper_pidfd_.reset();
  if (state_ == State::kRunning) {
    // The sandbox died with its keeper; end the job with what we have.
    exited_ = true;
    eof_[0] = eof_[1] = true;
    exited_msg_ = ExitedMsg();
    MaybeFinish();
  } else {
    ResetJob();
  }
  bool was_reserved = state_ == State::kReserved;
  state_ = was_reserved ? State::kReserved : State::kNoKeeper;
  stdin_.reset();
  pipes_[0].reset();
  pipes_[1].reset();
  if (hooks_.on_keeper_lost) hooks_.on_keeper_lost(*this);
}

}  // namespace sandpool
