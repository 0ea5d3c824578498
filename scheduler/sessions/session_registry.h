// The session registry in Redis (PROTOCOL.md section 13): each session's record
// (`<p>:session:<sid>`, a hash clients read for info and listing), the set of all sessions, each
// holder's set, and the set of hosts that hold sessions (which peers watch for lost hosts).
//
// Every change is one script (scripts.h SESSION_WRITE, SESSION_FORGET), so a peer never sees a
// record its sets do not list; every reply is checked, and a write that failed says so to its
// caller, who writes the record again (the records are this host's to keep true: Sessions
// rewrites what is dirty every heartbeat and all of them on every connect).
//
// Ownership: Sessions owns it; the connection outlives it. Loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "queue/keys.h"
#include "scheduler/config/config.h"
#include "scheduler/redis/redis_async.h"
#include "scheduler/sessions/session_store.h"

namespace sandpool {

// What a record says besides the session's meta.
struct SessionRecordState {
  const char* state = "stopped";
  int64_t last_used_ms = 0;
  int64_t timeout_at_ms = 0;
  std::string error;
};

class SessionRegistry {
 public:
  SessionRegistry(RedisAsync* cmd, const Keys& keys, const DaemonConfig& config)
      : cmd_(cmd), keys_(keys), config_(config) {}

  // Writes the session's record whole, held by this daemon. `done(false)` when it was not
  // written (not sent, or Redis refused: logged); never called if the connection dropped
  // before the reply (the caller's record stays dirty until it hears `true`).
  void Write(const SessionMeta& m, const SessionRecordState& s, std::function<void(bool written)> done);
  // The session is gone (destroyed): its record says so for the result TTL, its id is free.
  // `holder`: the consumer that held it ("" for this daemon).
  void Forget(const std::string& sid, const std::string& holder = "");
  // Once after start: Redis's view of this host's sessions is made to match its disk. Records
  // this host is listed for but holds no files of are forgotten; for each of `held` whose record
  // says "destroyed" (a peer destroyed it while this host was away), `destroyed_away(sid)` runs.
  // `done` runs when every answer is in; never, if the connection dropped (call again then).
  void Reconcile(std::vector<std::string> held, std::function<void(const std::string& sid)> destroyed_away,
                 std::function<void()> done);

 private:
  RedisAsync* cmd_;
  const Keys& keys_;
  const DaemonConfig& config_;
};

}  // namespace sandpool
