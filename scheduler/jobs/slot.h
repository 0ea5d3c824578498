// The daemon's side of one pool slot: the channel to its keeper, the sandbox it has ready, and the
// job running in it with the job's stdio pipes, all driven by the libevent loop.
//
// Two things are tracked apart: the slot's sandbox (none while it has no keeper, preparing, or
// ready with its pipes handed over) and its job. Life of a job: Reserve() takes a ready slot for
// a job whose Redis claim is in flight; then Start() with the claimed job, or Release() if the
// claim said not to run it. Start hands the job to the ready sandbox (its wall timeout starts
// then). Output is read as it comes and handed to the owner (on_output) up to the job's cap; the
// job ends when the keeper reports Exited and both pipes reached EOF, and the owner gets the
// JobResult (on_finished).
//
// A sandbox that dies before the job started in it (it died while idle, or its keeper did) costs
// the job nothing: the job waits for the slot's next sandbox and runs there (at most
// kMaxSandboxRetries times, then it ends as sandbox_failed).
//
// Ownership: Pools own Slots; callbacks run on the loop thread and must not destroy the Slot.
#pragma once

#include <event2/event.h>
#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/fd.h"
#include "queue/protocol.h"
#include "scheduler/jobs/loop_channel.h"
#include "scheduler/jobs/outcome.h"
#include "scheduler/jobs/process_io.h"
#include "worker/ipc/messages.h"

namespace sandpool {

class Slot;

// A job handed to a slot: the validated spec plus what the queue knows about it.
struct SlotJob {
  JobSpec spec;
  std::string stream;       // the queue stream its entry is in
  std::string entry;        // stream entry id
  uint32_t attempt = 1;
  uint64_t queue_wait_us = 0;
  int64_t enqueued_ms = 0;  // its first XADD (wall clock): schedule-to-start counts from here
  // Effective limits: the job's own, or the template's.
  uint64_t cpu_time_ms = 0;
  uint64_t memory_bytes = 0;
  uint64_t pids = 0;
  // Network templates: the job's effective policy (its result shows it), and whether its slot
  // was narrowed for it (undone when it ends).
  std::optional<NetworkInfo> network;
  bool narrowed = false;
};

struct SlotHooks {
  std::function<void(Slot&)> on_ready;                 // the slot can take a job
  std::function<void(Slot&)> on_started;               // the job's process started
  std::function<void(Slot&, std::string_view stream, std::string_view data)> on_output;
  std::function<void(Slot&, const SlotJob&, JobResult&&)> on_finished;  // the job is over
  std::function<void(Slot&)> on_keeper_lost;           // the keeper died; a new one is needed
  std::function<void(Slot&, double seconds)> on_prepared;  // sandbox preparation time
  std::function<void(Slot&)> on_prepare_failed;           // the keeper could not prepare one
};

class Slot {
 public:
  static constexpr int kKillAnswerMs = 5000;
  static constexpr int kMaxSandboxRetries = 3;

  // `template_index` and `runtime` ("", "sh", "bash", "python", "node") are the template's whose
  // sandboxes this slot's keeper prepares; `template_env` is added to every job's environment.
  Slot(struct event_base* base, uint32_t index, uint32_t template_index, std::string runtime,
       std::vector<std::string> template_env, SlotHooks hooks);
  ~Slot();
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;

  uint32_t index() const { return index_; }
  uint32_t template_index() const { return template_index_; }
  bool active = true;  // false once retired (or not yet reused); a retired slot gets no keeper
  bool has_keeper() const { return channel_.open(); }
  // A sandbox is ready and no job holds the slot.
  bool ready() const { return sandbox_ready_ && !reserved_ && !job_; }
  // A job holds the slot (reserved for a claim in flight, waiting for a sandbox, or running).
  bool busy() const { return reserved_ || job_.has_value(); }
  // Its keeper is preparing its next sandbox (after a job, or its first): ready soon.
  bool refilling() const { return has_keeper() && !sandbox_ready_ && !busy() && !failing_; }
  bool failing() const { return failing_; }
  const SlotJob* job() const { return job_ ? &*job_ : nullptr; }
  // Sequence numbers of the live events of the current job (0 = started).
  uint64_t NextSeq() { return seq_++; }

  // A keeper started for this slot: `channel` is its end of the conversation, `pidfd` the
  // keeper process (to kill it if it stops answering).
  void AttachKeeper(UniqueFd channel, pid_t pid, UniqueFd pidfd);
  // REQUIRES ready(). Holds the slot for a job whose claim is in flight.
  void Reserve();
  // REQUIRES busy() by Reserve(). The claim said not to run it; on_ready runs if the slot is ready.
  void Release();
  // REQUIRES busy() by Reserve(). Runs the claimed job (now, or in the next sandbox if this one
  // died meanwhile).
  void Start(SlotJob job);
  // Kills the running job (no-op if none or already killed); the result says why. A keeper that
  // has not reported the sandbox's end kKillAnswerMs later is killed and replaced, and the job
  // ends with what it has: no job outlives its timeout by more than that margin. A job still
  // waiting for a sandbox ends at once.
  void Kill(KillReason reason);
  // Closes the keeper channel (the keeper exits and its sandbox dies); a job is dropped unfinished.
  void Shutdown();

 private:
  static void OnTimeout(evutil_socket_t, short, void* arg);
  static void OnKillUnanswered(evutil_socket_t, short, void* arg);

  void HandleFrame(Frame& f);
  void AcceptReady(Frame& f);
  void Launch();
  bool RetryUnstarted(const char* why);
  void MaybeFinish();
  void FinishNow(ExitedMsg exited);
  void LoseKeeper(const std::string& why);
  void DropSandbox();
  void ResetLaunch();
  void SendToKeeper(MsgType t, const std::string& payload);
  void NotifyStarted();

  struct event_base* base_;
  uint32_t index_;
  uint32_t template_index_;
  std::string runtime_;
  std::vector<std::string> template_env_;
  SlotHooks hooks_;
  bool failing_ = false;
  pid_t keeper_pid_ = -1;
  UniqueFd keeper_pidfd_;
  LoopChannel channel_;

  // The prepared sandbox: its generation and pipes (from Ready until its job ends or it dies).
  bool sandbox_ready_ = false;
  uint64_t generation_ = 0;
  UniqueFd stdin_, pipes_[2];
  // The keeper's Ready for the next sandbox can arrive (in the same read, even) while the last
  // job's output is still being drained from the old pipes; it is applied once that job ends.
  std::optional<Frame> deferred_ready_;

  // The job.
  bool reserved_ = false;
  std::optional<SlotJob> job_;
  bool launched_ = false;  // handed to the current sandbox (Run sent)
  int sandbox_retries_ = 0;
  JobResult result_;
  uint64_t seq_ = 0;
  ProcessIo io_;  // the job's stdio, from Launch until it ends
  bool exited_ = false;
  bool started_notified_ = false;  // on_started runs once, before any output
  ExitedMsg exited_msg_;
  KillReason kill_ = KillReason::kNone;
  struct event* timeout_ev_ = nullptr;
  struct event* kill_answer_ev_ = nullptr;  // armed by Kill(), cleared by the keeper's Exited
};

}  // namespace sandpool
