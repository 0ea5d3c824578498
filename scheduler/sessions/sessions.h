// The sessions this daemon holds (PROTOCOL.md sections 12-19): their life cycle, and the
// routing of each operation to its Session. The pieces, each a module of this folder:
//   jobs/stream_reader reads the operation streams (below), as it reads the job path's
//   op_dispatch.cc     routes, claims and serves each operation (this class)
//   op_answers         answers an operation or an unclaimed entry, in its op's form
//   session_registry   the records in Redis (one script per change)
//   session_store      the files on this host's disk (meta, disk image)
//   spares             warm spares and session keepers started ahead
//   snapshot_jobs.cc   snapshot operations and one-shot jobs on snapshot templates (this class)
//   lost_hosts         what every daemon does for its peers' sessions
//   session            one session's sandbox: commands, processes, files, code contexts
//
//   intake  `<p>:sreq:<queue>`             a create of a session nobody holds; read only while
//                                            this host has room for one more session. Each entry
//                                            is moved at once (SESSION_ROUTE) to the holder's
//                                            stream, making the record first if it is new.
//   own     `<p>:sreq:<queue>:<consumer>`  every operation on this daemon's sessions; claimed
//                                            like a job (CLAIM, one attempt: an operation that
//                                            was running when its daemon died ends worker_lost,
//                                            never runs twice), answered through the ledger.
//
// A create that asks only for its template's defaults adopts that template's warm spare: a
// session sandbox already running on a fresh disk (`<state-dir>/sessions/w-<n>`, renamed to the
// session's directory), so it costs about what a job's start costs. A spare is made after the
// first create of a template and after each adoption, while the host budget has room for it
// (it holds one sandbox of the budget, and is given up when a session needs the room).
//
// Life cycle (section 14): creating -> running -> stopping -> stopped (files kept), resumed by
// another create; destroying -> destroyed. A session's files live in its disk image,
// `<state-dir>/sessions/s-<sid>/disk.img`, next to `meta` (its options, msgpack): after a
// restart, the sessions found there are stopped, whatever Redis remembers. While running, a
// session holds one sandbox of the host budget (session_host.h; the daemon's is Pools).
//
// Failure handling:
//  - a daemon that dies leaves its sessions `lost` (peers mark them, once no connection of its is
//    left and Redis has been up for a lease, and answer the operations sent to it: session_lost,
//    or worker_lost for one that was running); when it comes back they are stopped again;
//  - a create nobody had room for is answered host_full after its wait_ms, by any daemon;
//  - every operation claimed here is answered, whatever happens to the sandbox (session.h).
//
// Ownership: the Daemon owns it; the connections, ledger, host and clock outlive it. Loop thread
// only. Time is read from `clock` (idle and lifetime stops, records), so a test can step it.
#pragma once

#include <event2/event.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "metrics/metrics.h"
#include "queue/keys.h"
#include "queue/session_protocol.h"
#include "scheduler/config/config.h"
#include "scheduler/jobs/job_ledger.h"
#include "scheduler/jobs/session_host.h"
#include "scheduler/jobs/stream_reader.h"
#include "scheduler/redis/redis_async.h"
#include "scheduler/sessions/lost_hosts.h"
#include "scheduler/sessions/op_answers.h"
#include "scheduler/sessions/session.h"
#include "scheduler/sessions/session_registry.h"
#include "scheduler/sessions/session_store.h"
#include "scheduler/sessions/snapshots.h"
#include "scheduler/sessions/spares.h"

namespace sandpool {

class PortExposure;  // port_exposure.h
struct Network;      // net_setup.h

class Sessions {
 public:
  // `on_idle` runs when an operation or a sandbox ends (the daemon may be waiting to exit).
  Sessions(struct event_base* base, const DaemonConfig& config, const Keys& keys, RedisAsync* cmd, JobLedger* ledger,
           SessionHost* host, Metrics* metrics, std::function<void()> on_idle,
           const Clock& clock = SystemClock());
  ~Sessions();
  Sessions(const Sessions&) = delete;
  Sessions& operator=(const Sessions&) = delete;

  // Network templates (net_setup.h): exposed ports (expose, unexpose, ports; without a preview
  // proxy those ops are `unsupported`), and sessions' own egress policies.
  void SetNetwork(Network* network);
  // Finds the sessions on this host's disk (all stopped now) and connects the reader.
  Status Start();
  // The daemon's command connection came (back) or went.
  void OnCommandConnected();
  void OnCommandDisconnected();
  // Every heartbeat: idle and lifetime stops, records, lost hosts, expired creates.
  void Heartbeat();
  // A cancel for an op id (a running exec or code, or an output wait). False if not here.
  bool Cancel(const std::string& op_id);
  // Op ids that run here now (their cancel flags are polled with the jobs').
  std::vector<std::string> RunningOps() const;
  // Stops reading; sessions keep serving what they have. StopAll() then ends every sandbox
  // (files kept; the sessions are stopped).
  void Drain();
  void StopAll();
  // Nothing runs: no sandbox, no operation in flight.
  bool Idle() const;
  // A one-shot job whose template is not configured here (intake.h kUnconfiguredTemplate): if a
  // snapshot has that name, it runs in a session made from it (its warm spare when there is
  // one) that is destroyed after; else it ends with bad_field. The entry is claimed and answered
  // as any job's (job_ledger.h).
  void RunJob(JobSpec spec, const std::string& stream, const std::string& entry);
  void Close();

 private:
  enum class State { kCreating, kRunning, kStopping, kStopped, kDestroying, kError };
  static const char* StateName(State s);

  using Op = SessionOpEntry;

  struct Entry {
    SessionMeta meta;
    State state = State::kStopped;
    uint32_t template_index = 0;
    int64_t last_used_ms = 0;
    std::string error;
    std::unique_ptr<Session> session;   // creating, running, stopping
    bool budget = false;                // holds its share of the host budget
    std::optional<uint32_t> narrowed_slot;  // its slot, narrowed to its policy while it runs
    bool record_dirty = true;
    int64_t create_started_us = 0;
    bool fresh_disk = false;            // its disk was made new and no sandbox has started on it yet
    std::vector<Op> waiting;            // arrived while creating or stopping: served after
    std::vector<std::function<void()>> after_end;  // run once the sandbox is gone
    // A one-shot job's session (RunJob): no record, never listed, destroyed when the job ends.
    // `job_start` runs once it is running (or with false if it could not start).
    bool internal = false;
    std::function<void(bool started, const std::string& why)> job_start;
  };

  // Reading (op_dispatch.cc).
  void OnIntakeEntry(const std::string& entry, const std::map<std::string, std::string>& fields);
  // Takes `fields`' request (`req`) when it decodes; the rest is left as it was.
  void OnOwnEntry(const std::string& entry, std::map<std::string, std::string>& fields);
  bool HasRoom() const;

  // Operations.
  void Serve(Op op);
  void Create(Entry& e, Op op);
  // The rest of a create once its template is known: `image` (a snapshot's) is copied as its disk,
  // or a new disk of its size is made when empty.
  // `version` tells snapshots of one name apart (a spare is adopted only by its own version).
  void CreateOn(const std::string& sid, uint32_t t, const std::string& image, uint64_t snapshot_disk_bytes,
                const std::string& version);
  void TakeSnapshot(Entry& e, Op op);
  void DeleteSnapshot(const Op& op);
  void StartJob(std::shared_ptr<JobSpec> spec, std::string stream, std::string entry, uint32_t attempt);
  void EndJob(const std::string& sid, JobResult&& r, uint64_t seq, const std::string& stream, const std::string& entry);
  void Resume(Entry& e);
  void Launch(Entry& e, bool fresh);
  void Started(Entry& e);
  void StartFailed(Entry& e, const std::string& why);
  void Ended(Entry& e, const std::string& why, bool asked);
  void StopSession(Entry& e, std::function<void()> then);
  void Destroy(Entry& e, std::optional<Op> op);
  void Info(Entry& e, Op op);
  void RunOp(Entry& e, Op op);
  OpAnswer Ports(const Entry& e, const SessionRequest& r);  // expose, unexpose, ports

  // Answers of claimed operations (op_answers.h); each ends one operation in flight.
  void AnswerOp(const Op& op, OpAnswer answer);
  void AnswerCommand(const Op& op, JobResult&& r, uint64_t seq);
  void AnswerError(const Op& op, ErrorCode code, std::string message);
  // `own_entry`: the entry of this daemon's stream it came from ("" for a one-shot job's).
  void OpDone(const std::string& own_entry = "");

  // Records (session_registry.h).
  SessionInfo InfoOf(const Entry& e) const;
  int64_t TimeoutAt(const Entry& e) const;
  void WriteRecord(Entry& e);
  void Reconcile();
  void SetState(Entry& e, State s, std::string error = "");

  // The hooks of a session sandbox (a session's, or a warm spare's while `owner` is "").
  Session::Hooks HooksFor(std::shared_ptr<std::string> owner, const std::string& spare);
  std::unique_ptr<Session> StartSandbox(std::shared_ptr<std::string> owner, uint32_t t, const SessionMeta& m,
                                        const std::string& dir, bool fresh, SessionHost::KeeperHandle k, std::string* error);
  // Takes `memory` of the host budget for a session, giving up a spare if that makes room.
  bool TakeBudget(uint64_t memory);
  void Collect(std::unique_ptr<Session> s);

  struct event_base* base_;
  const DaemonConfig& config_;
  const Keys& keys_;
  RedisAsync* cmd_;
  JobLedger* ledger_;
  SessionHost* host_;
  const Clock& clock_;
  Metrics* metrics_;
  PortExposure* exposure_ = nullptr;
  Network* network_ = nullptr;
  std::function<void()> on_idle_;
  SessionLimits limits_;
  SessionStore store_;
  SessionRegistry registry_;
  OpAnswers answers_;
  std::unique_ptr<LostHosts> lost_hosts_;
  static constexpr size_t kReadBatch = 16;
  std::string own_stream_, intake_;
  std::unique_ptr<RedisAsync> reader_conn_;  // the session streams' blocking reads
  std::unique_ptr<StreamReader> reader_;
  std::unique_ptr<SessionSpares> spares_;
  std::unique_ptr<Snapshots> snapshots_;

  std::map<std::string, Entry> sessions_;  // by session id: every session this host holds
  std::map<std::string, std::string> op_session_;  // op id -> session id, while it runs
  size_t ops_in_flight_ = 0;
  std::set<std::string> own_entries_;  // entries of the own stream being claimed or served
  bool draining_ = false;
  bool reconciled_ = false;
  std::vector<std::unique_ptr<Session>> graveyard_;
  struct event* collect_ev_ = nullptr;
};

}  // namespace sandpool
