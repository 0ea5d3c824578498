// Warm spares (docs/ARCHITECTURE.md, "Sessions"): a running session sandbox on a fresh disk, one
// per template that has had a session (configured, or a snapshot: its own warm pool), adopted by
// the next create that asks for nothing but that template's defaults, the way a job takes a warm
// sandbox. At most kMostSpares in all, none with --session-spares 0. A spare holds one sandbox of
// the host budget, and gives way when a session needs the room. Also one session keeper per
// template with sessions, started ahead so that a create does not wait for a fork of the
// spawner.
//
// A spare's sandbox follows an `owner` string, "" while it is a spare; adoption sets it to the
// session's id, and the sandbox's hooks (made by the owner of this object) follow that.
//
// Ownership: Sessions owns it; config, host and store outlive it. Loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "queue/session_protocol.h"
#include "scheduler/config/config.h"
#include "scheduler/jobs/session_host.h"
#include "scheduler/sessions/session.h"
#include "scheduler/sessions/session_store.h"

namespace sandpool {

class SessionSpares {
 public:
  static constexpr size_t kMostSpares = 4;
  static constexpr size_t kMostKeepersAhead = 2;  // per template
  struct Hooks {
    // Starts a session sandbox in `dir` on keeper `k` (the owner's StartSandbox); nullptr and
    // `error` when it cannot.
    std::function<std::unique_ptr<Session>(std::shared_ptr<std::string> owner, uint32_t t, const SessionMeta& m,
                                           const std::string& dir, bool fresh, SessionHost::KeeperHandle k,
                                           std::string* error)>
        start_sandbox;
    // Takes a sandbox that is done with (it is destroyed off the current callback).
    std::function<void(std::unique_ptr<Session>)> collect;
  };

  SessionSpares(const DaemonConfig& config, const SessionLimits& limits, SessionHost* host, const SessionStore& store,
                Hooks hooks)
      : config_(config), limits_(limits), host_(host), store_(store), hooks_(std::move(hooks)) {}

  // Makes the spare of template `name` (configured template `t`, or a snapshot of base `t`
  // whose image is `image` at `version`) unless one exists, the limit is reached, or the budget
  // has no room.
  void Make(const std::string& name, uint32_t t, const std::string& image, uint64_t disk_bytes,
            const std::string& version);
  // The spare's sandbox is ready to be adopted.
  void Ready(const std::string& name);
  // A spare that failed, ended, or gives way: its budget, keeper and disk go ("" `why`: quietly).
  void Drop(const std::string& name, const std::string& why);
  // Gives up one spare (the first by name), for room; false if there is none.
  bool DropOne();
  bool empty() const { return spares_.empty(); }
  // The ready spare of `m.template_name` at `version`, if it was made with exactly `m`'s limits
  // and disk: its directory is renamed to the session's (`store.Dir(m.id)`), its sandbox adopted
  // (owner and environment). The spare's share of the budget becomes the session's. nullptr
  // otherwise (a spare of an older snapshot version is dropped).
  std::unique_ptr<Session> Adopt(const SessionMeta& m, const std::string& version);
  // A session keeper of template `t`: one kept ahead if there is one (and, if that was the
  // last, another is started ahead), else a new one.
  void TakeKeeper(uint32_t t, std::function<void(SessionHost::KeeperHandle)> done);
  // A keeper whose session of template `t` ended and that can serve another (Session::
  // TakeEndedKeeper): kept ahead for the next start, up to kMostKeepersAhead of `t` and while
  // every template could still start a keeper; otherwise let go (it exits). A stop followed by
  // a resume then costs no keeper's set-up, on its path or beside it.
  void KeepKeeper(uint32_t t, SessionHost::KeeperHandle k);
  // No more spares or keepers ahead; those there are given up.
  void Drain();
  // The daemon is going: spares are given up, keepers ahead forgotten.
  void Close();

 private:
  struct Spare {
    std::shared_ptr<std::string> owner = std::make_shared<std::string>();  // "" until adopted
    std::unique_ptr<Session> session;
    std::string dir;  // <state-dir>/sessions/w-<n>
    bool ready = false;
    uint32_t t = 0;         // the configured template it runs on
    SessionMeta defaults;   // the limits and disk it was made with
    std::string version;    // a snapshot's checksum@created_ms ("" for a configured template)
  };

  SessionMeta DefaultMeta(uint32_t t) const;
  void KeeperAhead(uint32_t t);

  const DaemonConfig& config_;
  const SessionLimits& limits_;
  SessionHost* host_;
  const SessionStore& store_;
  Hooks hooks_;
  bool draining_ = false;
  std::map<std::string, Spare> spares_;  // by template name (configured or snapshot)
  uint64_t next_spare_ = 1;
  std::map<uint32_t, std::vector<SessionHost::KeeperHandle>> keepers_ahead_;
  std::set<uint32_t> keeper_pending_;
};

}  // namespace sandpool
