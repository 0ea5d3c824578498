// Protocol v2: session requests and operation results (PROTOCOL.md sections 12-19). Pure data and
// codecs, like protocol.h: every decoder treats its input as hostile.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "queue/protocol.h"

namespace sandpool {

enum class SessionOp {
  kCreate, kInfo, kStop, kDestroy, kSnapshot, kSnapshotDelete,
  kExec, kCode, kContextRestart,
  kSpawn, kPs, kOutput, kStdin, kKill,
  kWrite, kAppend, kRead, kList, kStat, kExists, kMkdir, kRemove, kCopy, kRename,
  kExpose, kUnexpose, kPorts,
};

struct SessionOpInfo {
  std::string_view name;
  SessionOp op;
  bool file_op;       // done by the session's agent from the request map itself
  bool needs_running; // fails with session_stopped unless the session runs
};
// The table of operations: their names, and how each is served.
const SessionOpInfo* FindSessionOp(std::string_view name);
const SessionOpInfo& SessionOpOf(SessionOp op);

struct SessionCreateOptions {
  std::string template_name = "default";
  bool template_given = false;  // a create that names none connects to any template
  std::vector<std::pair<std::string, std::string>> env;
  uint64_t memory_bytes = 0, pids = 0, disk_bytes = 0;  // 0: the server's default
  double cpus = 0;                                      // 0: the template's
  std::optional<uint64_t> idle_timeout_ms, max_lifetime_ms;
  bool ephemeral = false;
  std::vector<std::pair<std::string, std::string>> labels;
  uint64_t wait_ms = 30000;
  std::optional<EgressRequest> egress;  // version 3 requests only
};

struct SessionRequest {
  uint32_t version = 2;
  std::string id;       // the op id
  std::string session;  // the session id
  SessionOp op = SessionOp::kInfo;
  // exec, spawn, code: the command and its job fields (argv/shell/code, env, cwd, stdin,
  // timeout_ms, max_output_bytes), validated as a job map's (section 3).
  JobSpec command;
  bool as_root = false;
  std::string context = "default";  // code, context_restart
  bool stdin_pipe = true;            // spawn: "pipe" or "ignore"
  std::string pid;                   // output, stdin, kill
  std::optional<uint64_t> tail_lines;
  bool wait = false;
  uint64_t wait_timeout_ms = 30000;
  std::string data;                  // stdin
  bool close = false;                // stdin
  int signal = 15;                   // kill
  uint32_t port = 0;                 // expose, unexpose (1..65535)
  std::string name;                  // snapshot, snapshot_delete
  SessionCreateOptions create;
  std::string raw;                   // the request map as received (file operations)
};

// Session limits the request is checked against (besides the job fields' ServerLimits).
struct SessionLimits {
  uint64_t max_disk_bytes = 64ull << 30;
  uint64_t default_disk_bytes = 1ull << 30;
  uint64_t min_disk_bytes = 64ull << 20;
};

std::variant<SessionRequest, JobError> DecodeSessionRequest(std::string_view payload, const ServerLimits& limits,
                                                            const SessionLimits& session_limits);
// The same, with the decoded request's `raw` taking `payload`'s buffer instead of a copy of it (a
// file written to a session: up to 32 MiB). `payload` is left empty when the request decodes, and
// as it was when it does not (its answer reads the op from it).
std::variant<SessionRequest, JobError> TakeSessionRequest(std::string& payload, const ServerLimits& limits,
                                                          const SessionLimits& session_limits);

// The operation result map (section 13), `value` a msgpack map (or empty: nil).
struct OpResult {
  std::string id, op, session;
  std::optional<JobError> error;  // set: ok is false
  std::string value;
};
std::string EncodeOpResult(const OpResult& r);
// An operation's stored result and its `exited` event (section 16). The event carries the result
// unless the stored result is larger than kMaxCarriedResultBytes; then it names its size
// (`result_bytes`) and the client reads the result key, so the bytes cross Redis once.
struct EncodedOpAnswer {
  std::string result, event;
};
EncodedOpAnswer EncodeOpAnswer(const OpResult& r);
std::optional<OpResult> DecodeOpResult(std::string_view bytes);

// The session info (PROTOCOL.md section 15, the value of `create`, `info` and `stop`). Figures
// of a session that is not running are 0.
struct SessionInfo {
  std::string session, state, template_name, host;
  int64_t created_ms = 0, last_used_ms = 0, timeout_at_ms = 0;
  std::vector<std::pair<std::string, std::string>> labels;
  bool ephemeral = false;
  uint64_t memory_bytes = 0, memory_limit_bytes = 0, cpu_time_us = 0, disk_bytes = 0, disk_limit_bytes = 0;
  uint64_t processes = 0;
  double cpus = 0;
  std::string error;
  std::optional<NetworkInfo> network;  // sessions of network templates: their egress policy
};
std::string EncodeSessionInfo(const SessionInfo& info);

// Live output of a background process (section 15): {v: 2, type, seq, data} or the last,
// {v: 2, type: "exited", seq, exit_code, signal}.
std::string EncodeProcessOutputEvent(uint64_t seq, std::string_view stream, std::string_view data);
std::string EncodeProcessExitedEvent(uint64_t seq, std::optional<int> exit_code, std::optional<int> signal);

}  // namespace sandpool
