// One hiredis async connection driven by the daemon's libevent loop, that reconnects by itself.
//
// Contract:
//  - Command() sends at once if connected and returns true; the callback then runs exactly
//    once, with the reply, or with nullptr if the connection was lost first. When not connected
//    (or hiredis refuses the command) it returns false and never calls the callback: the caller
//    decides what waits and what is dropped (the daemon keeps results in memory, drops live
//    output).
//  - Every connection names itself (CLIENT SETNAME `client_name`) before anything else, so peers
//    can tell from CLIENT LIST which daemons hold a live connection.
//  - OldestPendingMs() says how long the oldest command without a reply has waited: a Redis
//    that accepts connections but does not answer (paused, stuck) shows there.
//  - Commands on one connection are executed by Redis in the order sent.
//  - After a disconnect, reconnection is retried with exponential backoff (50 ms .. 2 s) until
//    Close(). on_connect runs after AUTH/SELECT were queued, so commands it sends are
//    authenticated; on_disconnect runs once per lost connection.
//  - Subscriptions are re-issued automatically on every (re)connect.
// Not thread-safe: loop thread only. Callbacks may call back into this object.
#pragma once

#include <event2/event.h>
#include <hiredis/async.h>

#include <functional>
#include <deque>
#include <map>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "queue/redis_url.h"

namespace sandpool {

class RedisAsync {
 public:
  using Callback = std::function<void(redisReply* reply)>;
  struct Hooks {
    std::function<void()> on_connect;
    std::function<void()> on_disconnect;
    // Every reply (not lost ones): its round trip in seconds (-1 for blocking commands, whose
    // wait is by design) and the reply, for metrics. Must not send commands.
    std::function<void(double seconds, const redisReply* reply)> on_reply;
  };

  // `name` is for logs; `client_name` (may be empty) what CLIENT SETNAME is given.
  RedisAsync(struct event_base* base, RedisUrl url, std::string name, Hooks hooks, std::string client_name = "");
  ~RedisAsync();
  RedisAsync(const RedisAsync&) = delete;
  RedisAsync& operator=(const RedisAsync&) = delete;

  void Connect();
  // Disconnects for good; pending callbacks get nullptr.
  void Close();
  bool connected() const { return connected_; }

  bool Command(const std::vector<std::string>& args, Callback cb);
  // The same, with arguments the caller keeps (hiredis copies them before this returns): a large
  // value (a session's file in a result) is not copied into a vector of strings first.
  bool CommandOf(std::initializer_list<std::string_view> args, Callback cb);
  // Runs the Lua script `body` (a string that lives as long as the program: scripts.h) with
  // `args` (numkeys, the keys, then the arguments). Sent as EVALSHA with the body's SHA-1, so
  // that Redis neither receives nor hashes the body on every call (with EVAL that hashing was
  // most of Redis's CPU per job); when Redis answers NOSCRIPT (a fresh or restarted Redis, SCRIPT
  // FLUSH) it is sent once more as EVAL, which also caches it. Same contract as Command: `cb`
  // runs exactly once, unless this returns false.
  bool Eval(const char* body, std::vector<std::string> args, Callback cb);
  // Scripts to SCRIPT LOAD on every (re)connect, before anything else is sent: then Eval's
  // NOSCRIPT fallback is only for a SCRIPT FLUSH behind our back. Call before Connect().
  void PreloadScripts(std::vector<const char*> bodies) { preload_ = std::move(bodies); }
  // 0 when nothing is outstanding (subscriptions and blocking reads are not counted: see
  // CommandBlocking).
  int64_t OldestPendingMs() const;
  // Logs once when the oldest command has waited longer than `threshold_ms` (warning "redis not
  // answering") and once when answers come again ("redis answering again", with how long none
  // came, counted from when the oldest unanswered command was sent) or the connection is lost
  // meanwhile. Call it periodically (the daemon's heartbeat); the end is noticed at the reply.
  void WatchStall(int64_t threshold_ms);
  // Like Command, for a command that blocks on the server by design (XREADGROUP BLOCK): its
  // wait does not count in OldestPendingMs.
  bool CommandBlocking(const std::vector<std::string>& args, Callback cb);
  // Subscribes now (if connected) and after every reconnect; cb gets each ["message", channel,
  // payload] reply.
  void Subscribe(const std::string& channel, Callback cb);

 private:
  static void OnConnect(const redisAsyncContext* ac, int status);
  static void OnDisconnect(const redisAsyncContext* ac, int status);
  static void OnReply(redisAsyncContext* ac, void* reply, void* priv);
  static void OnMessage(redisAsyncContext* ac, void* reply, void* priv);
  static void OnRetryTimer(evutil_socket_t, short, void* arg);

  void ScheduleReconnect();
  // `args`: strings or string views (each with data() and size()); defined in the .cc, the
  // only place they are used.
  template <typename Args>
  bool SendRaw(const Args& args, redisCallbackFn* fn, void* priv);
  template <typename Args>
  bool Send(const Args& args, Callback cb, bool timed);

  struct event_base* base_;
  RedisUrl url_;
  std::string name_;
  Hooks hooks_;
  std::string client_name_;
  // Send times (monotonic us) of timed commands without a reply, oldest first: Redis answers in
  // order, so a reply always belongs to the front.
  std::deque<int64_t> sent_us_;
  redisAsyncContext* ac_ = nullptr;
  bool connected_ = false;
  bool closing_ = false;
  int backoff_ms_ = 50;
  bool warned_ = false;  // one warning per outage, not one per retry
  int64_t stall_since_us_ = 0;  // WatchStall: the stall being reported began then; 0: none
  int64_t stall_threshold_ms_ = 0;
  void EndStall(const char* how);
  struct event* retry_timer_ = nullptr;
  std::map<std::string, std::unique_ptr<Callback>> subscriptions_;
  std::vector<const char*> preload_;
  // Liveness token: callbacks in flight hold a weak copy, so a destroyed RedisAsync is noticed.
  std::shared_ptr<RedisAsync*> self_;
};

// A reply's text: strings, statuses and errors as they are, integers in decimal; "" otherwise
// (and for nullptr).
std::string ReplyString(const redisReply* r);
// A flat field/value array's pairs (HGETALL, a stream entry's fields); empty for anything else.
std::map<std::string, std::string> ReplyFields(const redisReply* r);

}  // namespace sandpool
