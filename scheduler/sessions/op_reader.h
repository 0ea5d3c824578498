// Reading session operations from Redis (PROTOCOL.md section 13), on a connection of its own
// (its reads block):
//   intake  `<p>:sreq:<queue>`             creates of sessions nobody holds; read only while
//                                            this host has room for one more session
//   own     `<p>:sreq:<queue>:<consumer>`  every operation on this daemon's sessions
// After every (re)connect it first reads what this consumer was given before and never acked
// (a previous run, or a reply lost with a connection; also what it is serving right now, which
// the owner skips), page by page, then blocks for new entries of both.
// Entries are handed over one by one; what becomes of them (routing, claiming, answering) is the
// caller's.
//
// Why not the job path's StreamReader (jobs/stream_reader.h): that one shares its capacity among
// an intake and a forward queue per template, claims dead daemons' entries and blocks on the
// intake alone; session operations are never reclaimed (a lost host's are answered: lost_hosts.h)
// and block on two streams at once. What both share is the reply's shape (ReplyFields).
//
// Ownership: Sessions owns it; it owns its connection. Loop thread only.
#pragma once

#include <event2/event.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "queue/keys.h"
#include "scheduler/config/config.h"
#include "scheduler/redis/redis_async.h"

namespace sandpool {

class SessionOpReader {
 public:
  using Fields = std::map<std::string, std::string>;
  struct Hooks {
    std::function<bool()> may_read;   // false while the owner is not ready (or is draining)
    std::function<bool()> has_room;   // whether to read the intake now
    std::function<void(const std::string& entry, const Fields& fields)> on_intake;
    std::function<void(const std::string& entry, const Fields& fields)> on_own;
  };

  SessionOpReader(struct event_base* base, const DaemonConfig& config, const Keys& keys, Hooks hooks);

  const std::string& own_stream() const { return own_stream_; }
  const std::string& intake() const { return intake_; }
  // Opens the connection (it reconnects by itself).
  void Connect();
  // Reads if it may and is not reading already (call when that may have changed).
  void Read();
  void Close();

 private:
  void CreateGroups();
  void Deliver(redisReply* streams);

  const DaemonConfig& config_;
  const Keys& keys_;
  Hooks hooks_;
  std::string own_stream_, intake_;
  std::unique_ptr<RedisAsync> conn_;
  bool reading_ = false, own_scan_ = true, groups_ready_ = false;
  std::string scan_from_[2] = {"0", "0"};  // the own scan's place in the own stream and the intake
};

}  // namespace sandpool
