// A private redis-server for C++ tests: started per test suite on a unix socket in a temporary
// directory and a free loopback TCP port, no persistence, killed (SIGKILL) and its directory
// removed when the object is destroyed. Tests skip when no redis-server was found at configure
// time (SANDPOOL_REDIS_SERVER, set by tests/support/CMakeLists.txt).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "queue/redis_sync.h"
#include "queue/redis_url.h"

namespace sandpool {

// A loopback TCP port nobody listens on right now (there is a small window before it is bound).
int FreeTcpPort();

// The redis-server binary found at configure time, or nullptr.
const char* TestRedisServerPath();

class TestRedisServer {
 public:
  TestRedisServer() = default;
  TestRedisServer(const TestRedisServer&) = delete;
  TestRedisServer& operator=(const TestRedisServer&) = delete;
  ~TestRedisServer();

  // Starts redis-server with `extra` arguments; false when it does not answer within 10 s.
  bool Start(const std::vector<std::string>& extra = {});

  RedisUrl UnixUrl() const;
  RedisUrl TcpUrl() const;
  const std::string& SocketPath() const { return sock_; }

 private:
  pid_t pid_ = -1;
  std::string dir_;
  std::string sock_;
  int port_ = 0;
};

// A blocking connection to `u`; nullptr (and a failed expectation) when it cannot connect.
std::unique_ptr<SyncRedis> MustConnect(const RedisUrl& u, int timeout_ms = 5000);

}  // namespace sandpool
