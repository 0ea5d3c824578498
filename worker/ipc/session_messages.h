// Messages of sessions (PROTOCOL.md sections 12-19), on two channels (worker/ipc/channel.h framing,
// msgpack payloads, both ends this binary):
//
//   scheduler <-> session keeper (the slot's keeper, in session mode: session_keeper.h)
//     SessionStart  sched -> keeper  fd: the session's disk image (opened by the scheduler)
//     SessionReady  keeper -> sched  fd: the agent's socket (the scheduler talks to it directly)
//     SessionFailed keeper -> sched  the sandbox could not be made; the keeper waits for the next start
//     SessionStop   sched -> keeper  end the sandbox (its disk is unmounted and kept)
//     SessionEnded  keeper -> sched  the sandbox is gone (asked for, or not: `why`)
//     StatsRequest / Stats           the sandbox's cgroup and disk figures, for `info`
//     Snapshot      sched -> keeper  fd: a new file; the keeper freezes the session's file system,
//                                    copies its disk image into it (sparse), thaws it
//     SnapshotDone  keeper -> sched  done (the bytes of data copied), or why not
//
//   scheduler <-> agent (the session sandbox's init: session_agent.h), each request with a `req`
//     Exec    sched -> agent   start a process        -> Started (+ fds stdin w, stdout r, stderr r)
//     Signal  sched -> agent   signal a process group -> Reply
//     File    sched -> agent   a file operation (the client's request map, decoded by the agent)
//                                                     -> Reply (its `value`, or an error code)
//     Exited  agent -> sched   a process it started ended (not tied to a request)
//
// Everything the agent sends is treated by the scheduler as coming from inside a sandbox:
// bounded, validated, never trusted for a decision about the host.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "worker/ipc/wire.h"  // EncodeMsg, DecodeMsg (kSandboxLimits: the agent is inside a sandbox)

namespace sandpool {

enum class SessionMsg : uint16_t {
  kStart = 30,
  kReady = 31,
  kFailed = 32,
  kStop = 33,
  kEnded = 34,
  kStatsRequest = 35,
  kStats = 36,
  kSnapshot = 37,
  kSnapshotDone = 38,
};

enum class AgentMsg : uint16_t {
  kExec = 100,
  kSignal = 101,
  kFile = 102,
  kStarted = 110,
  kExited = 111,
  kReply = 112,
};

struct SessionStartMsg {
  std::string session;
  bool fresh = false;          // a new, empty disk: lay out its directories first
  uint64_t memory_bytes = 0;   // 0: the template's
  uint64_t pids = 0;
  uint64_t cpu_quota_us = 0;
  MSGPACK_DEFINE_MAP(session, fresh, memory_bytes, pids, cpu_quota_us)
};

struct SessionReadyMsg {
  uint64_t generation = 0;
  uint64_t prepare_us = 0;
  MSGPACK_DEFINE_MAP(generation, prepare_us)
};

struct SessionFailedMsg {
  std::string message;
  MSGPACK_DEFINE_MAP(message)
};

struct SessionStopMsg {
  uint64_t generation = 0;
  MSGPACK_DEFINE_MAP(generation)
};

struct SessionEndedMsg {
  uint64_t generation = 0;
  std::string why;        // "stopped" (asked for), or what happened
  uint64_t oom_kills = 0;
  // The keeper can serve another session (it waits for the next Start): nothing of this one is
  // left in it (session_keeper.h).
  bool reusable = false;
  MSGPACK_DEFINE_MAP(generation, why, oom_kills, reusable)
};

struct SessionStatsMsg {
  uint64_t memory_bytes = 0, memory_limit_bytes = 0, cpu_usage_us = 0, processes = 0;
  uint64_t disk_used_bytes = 0, disk_total_bytes = 0;
  uint64_t oom_kills = 0, pids_max_hits = 0;  // cumulative, this run of the session
  MSGPACK_DEFINE_MAP(memory_bytes, memory_limit_bytes, cpu_usage_us, processes, disk_used_bytes, disk_total_bytes,
                     oom_kills, pids_max_hits)
};

struct SnapshotDoneMsg {
  std::string error;
  uint64_t data_bytes = 0;
  MSGPACK_DEFINE_MAP(error, data_bytes)
};

// A process to start. `shell` set: a line for a warm shell of the session (env and cwd are
// applied by the shell); else argv is exec'd (PATH searched in env).
struct AgentExecMsg {
  uint64_t req = 0;
  std::vector<std::string> argv;
  std::string shell;
  std::vector<std::string> env;  // the whole environment, "NAME=value"
  std::string cwd = "/work";
  bool as_root = false;
  bool stdin_pipe = true;        // false: stdin is /dev/null
  MSGPACK_DEFINE_MAP(req, argv, shell, env, cwd, as_root, stdin_pipe)
};

struct AgentStartedMsg {
  uint64_t req = 0;
  int64_t pid = 0;          // in the sandbox's pid namespace
  int32_t error = 0;        // errno when it could not be started (no fds then)
  std::string stage;        // where ("cwd", "exec", ...)
  MSGPACK_DEFINE_MAP(req, pid, error, stage)
};

struct AgentExitedMsg {
  int64_t pid = 0;
  int32_t wait_status = 0;
  int32_t error = 0;        // a warm shell that could not start the line (its cwd): errno
  std::string stage;
  uint64_t cpu_time_us = 0;       // the process and the children it waited for
  uint64_t peak_memory_bytes = 0; // its largest resident set
  uint64_t run_us = 0;
  MSGPACK_DEFINE_MAP(pid, wait_status, error, stage, cpu_time_us, peak_memory_bytes, run_us)
};

struct AgentSignalMsg {
  uint64_t req = 0;
  int64_t pid = 0;
  int32_t signal = 15;
  MSGPACK_DEFINE_MAP(req, pid, signal)
};

struct AgentFileMsg {
  uint64_t req = 0;
  std::string request;  // the client's request map (msgpack), as received; last: sent behind
                        // EncodeMsgHead, from its own buffer
  MSGPACK_DEFINE_MAP(req, request)
};

// AgentFileMsg as the agent decodes it: `request` views the frame's payload (DecodeMsg references
// the strings it accepts in its input, never copying one into a zone it frees), so a file's
// bytes are not copied before the operation reads them. Valid while that payload is.
struct AgentFileView {
  uint64_t req = 0;
  std::string_view request;
  MSGPACK_DEFINE_MAP(req, request)
};

// The field every answer a waiter awaits (kStarted, kReply) begins with, decoded alone to route
// the frame: a reply's value (a file's bytes) is then decoded once, by its waiter.
struct AgentReqOf {
  uint64_t req = 0;
  MSGPACK_DEFINE_MAP(req)
};

struct AgentReplyMsg {
  uint64_t req = 0;
  std::string error;    // a protocol error code (PROTOCOL.md section 19), or empty
  std::string message;
  std::string value;    // msgpack map, the operation's `value`; last: sent behind EncodeMsgHead
  MSGPACK_DEFINE_MAP(req, error, message, value)
};

}  // namespace sandpool
