// A blocking hiredis connection for clients, tests and benchmarks (never the daemon's loop):
// connects, AUTHs and SELECTs as the URL says. Owns the redisContext.
#pragma once

#include <hiredis/hiredis.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "queue/redis_url.h"

namespace sandpool {

struct RedisReplyDeleter {
  void operator()(redisReply* r) const { if (r) freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

class SyncRedis {
 public:
  // timeout_ms bounds connect and every command (0: no timeout).
  static Result<std::unique_ptr<SyncRedis>> Connect(const RedisUrl& url, int timeout_ms = 5000);
  ~SyncRedis();
  SyncRedis(const SyncRedis&) = delete;
  SyncRedis& operator=(const SyncRedis&) = delete;

  // Runs one command given as binary-safe arguments. A Redis error reply is returned as an
  // error Status (message from Redis); I/O errors too.
  Result<ReplyPtr> Command(const std::vector<std::string>& args);
  // Reads the next reply pushed on this connection (for SUBSCRIBE). timeout_ms < 0: block.
  Result<ReplyPtr> ReadReply(int timeout_ms = -1);
  // Sends a command without reading its reply (pipelining / SUBSCRIBE).
  Status Append(const std::vector<std::string>& args);

  redisContext* raw() { return ctx_; }

 private:
  explicit SyncRedis(redisContext* c) : ctx_(c) {}
  // Added: writes the output buffer out; ETIMEDOUT after io_timeout_ms_.
  Status Flush();
  // Added: the Status for the context's current error.
  Status ContextError(std::string_view what) const;
  redisContext* ctx_;
  int io_timeout_ms_ = 0;  // added: bounds Command (0: none)
};

}  // namespace sandpool
