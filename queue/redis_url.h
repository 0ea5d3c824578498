// Redis addresses: redis://[user:password@]host:port[/db] or unix:///path[?db=N]
// (user may be empty: redis://:password@host:port). Used by the daemon and every client; the
// same text comes from --redis or SANDPOOL_REDIS_URL.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace sandpool {

struct RedisUrl {
  std::string host;         // empty for unix sockets
  int port = 6379;
  std::string unix_path;    // set for unix:// URLs
  std::string user;         // empty: AUTH with password only (or none)
  std::string password;     // empty: no AUTH
  int db = 0;
  // The URL with the password replaced by "***", for logs.
  std::string Redacted() const;
};

Result<RedisUrl> ParseRedisUrl(std::string_view url);

}  // namespace sandpool
