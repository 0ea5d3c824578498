// The daemon's side of one pool slot: the channel to its keeper, the job running in it, and
// the job's stdio pipes, all driven by the libevent loop.
//
// Life of a job in a slot: Reserve() when a job is taken for it (before the Redis claim
// returns), Start() with the claimed job, or Release() if the claim said not to run it. While
// running, output is read as it comes and handed to the owner (OnOutput) up to the job's cap;
// the job ends when the keeper reports Exited and both pipes reached EOF, and the owner gets
// the finished JobResult (OnFinished). The slot then waits for the keeper's next Ready.
//
// Ownership: the Daemon owns Slots and outlives them; callbacks run on the loop thread.
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
#include "scheduler/loop_channel.h"
#include "scheduler/outcome.h"
#include "worker/messages.h"

namespace sandpool {

class Slot;

struct SlotHooks {
  std::function<void(Slot&)> on_ready;                 // a sandbox is ready for a job
  std::function<void(Slot&)> on_started;               // the job's process started
  std::function<void(Slot&, std::string_view stream, std::string_view data)> on_output;
  std::function<void(Slot&, JobResult&&)> on_finished;  // the job is over
  std::function<void(Slot&)> on_keeper_lost;           // the keeper died; a new one is needed
  std::function<void(Slot&, double seconds)> on_prepared;  // sandbox preparation time
};

// A job handed to a slot: the validated spec plus what the queue knows about it.
struct SlotJob {
  JobSpec spec;
  std::string entry;        // stream entry id
  uint32_t attempt = 1;
  uint64_t queue_wait_us = 0;
  // Effective limits: the job's own, or the server's defaults.
  uint64_t cpu_time_ms = 0;
  uint64_t memory_bytes = 0;
  uint64_t pids = 0;
};

class Slot {
 public:
  enum class State { kNoKeeper, kPreparing, kReady, kReserved, kRunning };

  // `template_index` and `runtime` ("", "sh", "bash", "python", "node") are the template's whose
  // sandboxes this slot's keeper prepares; `template_env` is added to every job's environment.
  Slot(struct event_base* base, uint32_t index, uint32_t template_index, std::string runtime,
       std::vector<std::string> template_env, SlotHooks hooks);
  ~Slot();
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;

  uint32_t index() const { return index_; }
  uint32_t template_index() const { return template_index_; }
  bool active = true;  // false once retired (or not yet reused); a retired slot is not respawned
  State state() const { return state_; }
  bool failing() const { return failing_; }
  const SlotJob* job() const { return job_ ? &*job_ : nullptr; }
  // The stream entry of the job that ran last (valid in on_finished, after job() is gone).
  const std::string& last_entry() const { return last_entry_; }
  // Sequence numbers of the live events of the current job (0 = started).
  uint64_t NextSeq() { return seq_++; }

  // A keeper started for this slot: `channel` is its end of the conversation, `pidfd` the
  // keeper process (to kill it if it stops answering).
  void AttachKeeper(UniqueFd channel, pid_t pid, UniqueFd pidfd);
  // kReady -> kReserved. The slot is held for a job whose claim is in flight.
  void Reserve();
  // kReserved -> kReady (the claim said not to run it).
  void Release();
  // kReserved -> kRunning: sends the job to the keeper.
  void Start(SlotJob job);
  // Kills the running job (no-op if none or already killed); the result says why. A keeper that
  // has not reported the sandbox's end kKillAnswerMs later is killed and replaced, and the job
  // ends with what it has: no job outlives its timeout by more than that margin.
  void Kill(KillReason reason);
  static constexpr int kKillAnswerMs = 5000;
  // Closes the keeper channel (the keeper exits and its sandbox dies).
  void Shutdown();

 private:
  static void OnPipe(evutil_socket_t fd, short, void* arg);
  static void OnStdin(evutil_socket_t fd, short, void* arg);
  static void OnTimeout(evutil_socket_t, short, void* arg);
  static void OnKillUnanswered(evutil_socket_t, short, void* arg);

  void HandleFrame(Frame& f);
  void AcceptReady(Frame& f);
  void ReadPipe(int which);
  void WriteStdin();
  void MaybeFinish();
  void LoseKeeper(const std::string& why);
  void ResetJob();
  void SendToKeeper(MsgType t, const std::string& payload);
  void NotifyStarted();

  struct event_base* base_;
  uint32_t index_;
  uint32_t template_index_;
  std::string runtime_;
  std::vector<std::string> template_env_;
  SlotHooks hooks_;
  State state_ = State::kNoKeeper;
  bool failing_ = false;
  pid_t keeper_pid_ = -1;
  UniqueFd keeper_pidfd_;
  LoopChannel channel_;
  uint64_t generation_ = 0;

  // Pipes of the prepared sandbox (valid from Ready until the job ends).
  UniqueFd stdin_, pipes_[2];
  struct event* pipe_ev_[2] = {nullptr, nullptr};
  struct event* stdin_ev_ = nullptr;
  struct event* timeout_ev_ = nullptr;
  struct event* kill_answer_ev_ = nullptr;  // armed by Kill(), cleared by the keeper's Exited

  std::optional<SlotJob> job_;
  std::string last_entry_;
  JobResult result_;
  uint64_t seq_ = 0;
  size_t stdin_off_ = 0;
  bool eof_[2] = {false, false};
  bool exited_ = false;
  bool started_notified_ = false;  // on_started runs once, before any output
  ExitedMsg exited_msg_;
  KillReason kill_ = KillReason::kNone;
  // The keeper's Ready for the next sandbox can arrive (in the same read, even) while the last
  // job's output is still being drained from the old pipes; it is applied once that job ends.
  std::optional<Frame> deferred_ready_;
};

}  // namespace sandpool
