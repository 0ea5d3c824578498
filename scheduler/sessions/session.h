// One running session's sandbox, as the daemon drives it (PROTOCOL.md sections 15-16): the
// session keeper that holds it (worker/session/session_keeper.h) and the agent inside it
// (worker/session/session_agent.h), both over loop channels, and what runs in it:
//   - commands (`exec`): followed like a job (ProcessIo), their events published on the op's
//     channel, a job result at the end; a timeout, cancel or output cap kills the command's
//     process group, never the session;
//   - background processes (`spawn`): their output kept (the newest 1 MiB of each stream) and
//     published live, stdin writable, waitable, killable;
//   - code contexts (`code`): one interpreter per context name (code_context.h);
//   - file operations: the client's request map handed to the agent, which does it inside.
// Everything the agent says is bounded and checked: it speaks from inside the sandbox.
//
// Life: Start() (a keeper and the session's disk) -> on_ready -> operations -> Stop() ->
// on_ended. The sandbox can also end on its own (killed from outside, its init died, its keeper
// died): on_ended says why. A sandbox that ends before on_ready (its keeper failed or died while
// making it) is reported by on_start_failed, never on_ended: exactly one of on_ready and
// on_start_failed runs, and on_ended only after on_ready. Every operation in flight then completes (commands with the error
// session_stopped and the output they had): no callback is ever left unanswered.
//
// Ownership: Sessions owns each Session; a Session owns its keeper, channels, processes and
// contexts. Callbacks run on the loop thread; none may destroy the Session (Sessions defers
// that to the loop). Destroying a Session answers what waits on it but runs none of the life
// hooks: its owner let go of it.
#pragma once

#include <event2/event.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "queue/protocol.h"
#include "queue/session_protocol.h"
#include "scheduler/jobs/loop_channel.h"
#include "scheduler/jobs/outcome.h"
#include "scheduler/jobs/session_host.h"
#include "scheduler/jobs/process_io.h"
#include "worker/ipc/session_messages.h"

namespace sandpool {

class CodeContext;

// A finished operation that is not a command: an error, or its value (a msgpack map; "" = nil).
struct OpAnswer {
  std::optional<JobError> error;
  std::string value;
  static OpAnswer Error(ErrorCode code, std::string message) { return OpAnswer{JobError{code, std::move(message)}, {}}; }
};

class Session {
 public:
  // Background processes keep the newest this many bytes of each stream; at most this many
  // exited ones are remembered (the oldest are forgotten first).
  static constexpr uint64_t kProcessOutputBytes = 1u << 20;
  static constexpr size_t kExitedProcesses = 64;
  // After a command's main process ended, output is still read this long (PROTOCOL.md 15).
  static constexpr int kAfterExitMs = 100;
  // A keeper that has not ended the sandbox this long after Stop is killed.
  static constexpr int kStopAnswerMs = 10000;

  struct Hooks {
    std::function<void(Session&)> on_ready;
    std::function<void(Session&, const std::string& why)> on_start_failed;
    // The sandbox is gone (the disk is unmounted and kept, unless the keeper died). `asked`:
    // Stop() was called.
    std::function<void(Session&, const std::string& why, bool asked)> on_ended;
    // An event for a channel (an op's `sandpool:out:<op id>`, a process's `pout`).
    std::function<void(const std::string& channel, std::string event)> publish;
    std::function<std::string(std::string_view op_id)> op_channel;
    std::function<std::string(std::string_view pid)> process_channel;
  };
  // A command (exec or code): its result, and the seq its exited event gets.
  using CommandDone = std::function<void(JobResult&& result, uint64_t exited_seq)>;
  using AnswerDone = std::function<void(OpAnswer&& answer)>;

  // `env`: the session's environment ("NAME=value", PROTOCOL.md 15 `create`), `template_env`
  // the template's; both go under every command's own.
  Session(struct event_base* base, std::string id, std::string worker, std::vector<std::pair<std::string, std::string>> env,
          std::vector<std::string> template_env, Hooks hooks);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::string& id() const { return id_; }
  // The agent answers: operations can run.
  bool ready() const { return agent_.open(); }
  bool ended() const { return ended_; }
  uint32_t keeper_slot() const { return keeper_slot_; }
  // The keeper, once the session ended by its keeper's Ended (the sandbox gone, the disk
  // released, the keeper waiting for another Start): the caller may give it the next session.
  // nullopt after any other end (a failed start, a keeper that died or had to be killed). The
  // slot is the caller's either way.
  std::optional<SessionHost::KeeperHandle> TakeEndedKeeper();

  // A warm spare becomes session `id` with the session's environment (nothing ran in it yet).
  void Adopt(std::string id, std::vector<std::pair<std::string, std::string>> env) {
    id_ = std::move(id);
    env_ = std::move(env);
  }
  // Hands the keeper the session's disk; on_ready or on_start_failed follows.
  void Start(SessionHost::KeeperHandle keeper, UniqueFd disk, const SessionStartMsg& start);
  // Ends the sandbox (processes killed, files kept); on_ended follows. Idempotent.
  void Stop();
  bool stopping() const { return stopping_; }

  // Commands. `attempt` is the op's claim's (it goes in the result).
  void Exec(const std::string& op_id, const JobSpec& command, bool as_root, uint32_t attempt, CommandDone done);
  void Code(const std::string& op_id, const std::string& context, const JobSpec& command, uint32_t attempt,
            CommandDone done);
  void ContextRestart(const std::string& context, const std::string& runtime, AnswerDone done);
  // A client cancelled a running exec or code (PROTOCOL.md section 7). False if not running here.
  bool Cancel(const std::string& op_id);
  std::vector<std::string> RunningCommands() const;

  // Background processes.
  void Spawn(const JobSpec& command, bool as_root, bool stdin_pipe, AnswerDone done);
  OpAnswer Ps() const;
  void Output(const std::string& pid, std::optional<uint64_t> tail_lines, bool wait, uint64_t wait_timeout_ms,
              AnswerDone done);
  void Stdin(const std::string& pid, const std::string& data, bool close, AnswerDone done);
  void Kill(const std::string& pid, int signal, AnswerDone done);
  size_t processes_running() const;

  // A file operation: `request` is the client's request map, done by the agent.
  void File(std::string request, AnswerDone done);
  // The sandbox's cgroup and disk figures; nullopt if it is gone.
  void Stats(std::function<void(std::optional<SessionStatsMsg>)> done);
  // A consistent copy of the running session's disk into `dest` (a new, empty file): its keeper
  // freezes the file system for the copy. done("" or why not, the bytes of data copied).
  void Snapshot(UniqueFd dest, std::function<void(std::string error, uint64_t data_bytes)> done);

  // ---- For code contexts (code_context.h): processes of the sandbox, by the agent's pid. ----
  // `started` gets the agent's answer (nullptr: the session ended first) and the process's
  // stdin, stdout and stderr; `exited` its end (nullptr: the session ended first).
  using StartedFn = std::function<void(const AgentStartedMsg* started, std::vector<UniqueFd> fds)>;
  using ExitedFn = std::function<void(const AgentExitedMsg* exited)>;
  void StartProcess(AgentExecMsg m, StartedFn started, ExitedFn exited);
  // Signals a process's group; `done` (may be empty) gets whether it was still there.
  void Signal(int64_t pid, int signal, std::function<void(bool)> done);
  // The environment a command runs with: its own variables over the session's, the template's
  // and the defaults.
  std::vector<std::string> CommandEnv(const JobSpec& command) const;
  struct event_base* base() const { return base_; }
  const std::string& worker() const { return worker_; }
  void Publish(const std::string& channel, std::string event) { hooks_.publish(channel, std::move(event)); }
  std::string OpChannel(std::string_view op_id) const { return hooks_.op_channel(op_id); }
  // Runs `later` from the loop, outside any callback (to destroy what a callback runs in).
  void Defer(std::function<void()> later);

 private:
  struct Command;
  struct Process;

  void OnKeeperFrame(Frame& f);
  void OnAgentFrame(Frame& f);
  // Answers everything waiting; then, unless `let_go` (the owner is destroying this Session and
  // has moved on: its entry may hold a new sandbox by now), on_start_failed or on_ended.
  void OnGone(const std::string& why, bool let_go = false);
  void EndSandbox();
  // The frame's payload is `head` (when given) then `payload`, whose buffer is not copied.
  void SendAgent(AgentMsg type, std::string payload, std::string_view head = {});
  uint64_t NextReq() { return ++req_; }
  void FinishCommand(Command& c);
  void KillCommand(Command& c, KillReason why);
  void ProcessEnded(Process& p);
  void ProcessWaitExpired(Process& p, uint64_t waiter);
  OpAnswer OutputOf(const Process& p, std::optional<uint64_t> tail_lines) const;
  static void OnStopUnanswered(evutil_socket_t, short, void* arg);
  static void OnDeferred(evutil_socket_t, short, void* arg);

  struct event_base* base_;
  std::string id_, worker_;
  std::vector<std::pair<std::string, std::string>> env_;
  std::vector<std::string> template_env_;
  Hooks hooks_;

  uint32_t keeper_slot_ = 0;
  pid_t keeper_pid_ = -1;
  UniqueFd keeper_pidfd_;
  std::optional<SessionHost::KeeperHandle> ended_keeper_;  // TakeEndedKeeper
  LoopChannel keeper_, agent_;
  bool stopping_ = false, ended_ = false;
  bool asked_ = false;  // Stop() was called (not: the sandbox ended on its own)
  bool ready_ = false;  // the keeper said Ready: before it, an end is a failed start
  std::string died_;    // why, when it ended on its own
  struct event* stop_answer_ev_ = nullptr;
  struct event* deferred_ev_ = nullptr;
  std::vector<std::function<void()>> deferred_;

  uint64_t req_ = 0;
  // Requests to the agent waiting for their Started or Reply (nullptr: the session ended).
  std::map<uint64_t, std::function<void(Frame*)>> waiting_;
  // Processes started, by the agent's pid, waiting for their Exited.
  std::map<int64_t, ExitedFn> exits_;
  std::vector<std::function<void(std::optional<SessionStatsMsg>)>> stats_waiting_;
  std::vector<std::function<void(std::string, uint64_t)>> snapshot_waiting_;
  // The cgroup's OOM kills and refused forks when a command last looked (limit_check below).
  uint64_t oom_seen_ = 0, pids_seen_ = 0;

  std::map<std::string, std::unique_ptr<Command>> commands_;   // by op id
  std::map<std::string, std::unique_ptr<Process>> processes_;  // by "p<n>"
  uint64_t next_process_ = 1;
  std::map<std::string, std::unique_ptr<CodeContext>> contexts_;  // by "<runtime>:<name>"
};

}  // namespace sandpool
