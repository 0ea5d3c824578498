// Internal to scheduler/sessions/session*.cc: the pieces of Session's implementation that its
// files share (the command and process records, small encoders). Not a public header.
#pragma once

#include <signal.h>
#include <sys/wait.h>

#include <msgpack.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "scheduler/sessions/session.h"

namespace sandpool {
namespace session_detail {


inline void PackStr(msgpack::packer<msgpack::sbuffer>& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

inline void PackBin(msgpack::packer<msgpack::sbuffer>& pk, std::string_view s) {
  pk.pack_bin(static_cast<uint32_t>(s.size()));
  pk.pack_bin_body(s.data(), static_cast<uint32_t>(s.size()));
}

inline void PackOptInt(msgpack::packer<msgpack::sbuffer>& pk, std::optional<int> v) {
  if (v) pk.pack_int64(*v);
  else pk.pack_nil();
}

inline std::string Str(const msgpack::sbuffer& b) { return std::string(b.data(), b.size()); }

// The last `n` lines of `s` (a final line without its newline counts as one).
inline std::string_view TailLines(std::string_view s, uint64_t n) {
  if (n == 0) return {};
  size_t end = s.size();
  if (end > 0 && s[end - 1] == '\n') --end;
  size_t pos = end;
  for (uint64_t seen = 0; pos > 0; --pos) {
    if (s[pos - 1] == '\n' && ++seen == n) break;
  }
  return s.substr(pos);
}

// How a process of the agent ended, as a job's would have (outcome.h).
inline ExitedMsg AsExited(const AgentExitedMsg& e) {
  ExitedMsg x;
  x.have_status = e.error == 0;
  x.wait_status = e.wait_status;
  x.exec_errno = e.error;
  x.exec_stage = e.stage;
  x.started = e.error == 0;
  x.cpu_time_us = e.cpu_time_us;
  x.peak_memory_bytes = e.peak_memory_bytes;
  x.exec_time_us = e.run_us;
  return x;
}

}  // namespace session_detail

// A command (exec) from start to result.
struct Session::Command {
  std::string op_id;
  uint32_t attempt = 1;
  JobSpec spec;
  CommandDone done;
  int64_t pid = 0;
  uint64_t seq = 0;
  ProcessIo io;
  bool exited = false, finished = false, gone = false, checking = false;
  uint64_t oom_kills = 0, pids_max_hits = 0;  // new in the session's cgroup since it started
  AgentExitedMsg exit;
  KillReason kill = KillReason::kNone;
  struct event* timeout_ev = nullptr;
  struct event* after_exit_ev = nullptr;
  Session* session = nullptr;

  ~Command() {
    if (timeout_ev) event_free(timeout_ev);
    if (after_exit_ev) event_free(after_exit_ev);
  }
};

// A background process (spawn), remembered after it exits.
struct Session::Process {
  std::string id, command;
  int64_t pid = 0;
  ProcessIo io;
  uint64_t seq = 0;
  bool exited = false, eof = false, done = false;
  std::optional<int> exit_code, signal;
  int64_t started_ms = 0, ended_ms = 0;
  struct event* after_exit_ev = nullptr;
  struct Waiter {
    uint64_t id;
    std::optional<uint64_t> tail_lines;
    AnswerDone done;
    struct event* timer;
  };
  std::vector<Waiter> waiters;
  uint64_t next_waiter = 1;
  Session* session = nullptr;

  ~Process() {
    if (after_exit_ev) event_free(after_exit_ev);
    for (Waiter& w : waiters) event_free(w.timer);
  }
};

using namespace session_detail;  // NOLINT: internal header of two .cc files

}  // namespace sandpool
