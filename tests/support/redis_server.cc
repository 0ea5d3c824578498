#include "tests/support/redis_server.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "common/clock.h"
#include "common/fd.h"

namespace sandpool {
int FreeTcpPort() {
  UniqueFd s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return -1;
  socklen_t len = sizeof(a);
  if (getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) return -1;
  return ntohs(a.sin_port);
}

const char* TestRedisServerPath() {
#ifdef SANDPOOL_REDIS_SERVER
  return SANDPOOL_REDIS_SERVER;
#else
  return nullptr;
#endif
}

bool TestRedisServer::Start(const std::vector<std::string>& extra) {
  const char* server = TestRedisServerPath();
  if (server == nullptr) return false;
  std::string tmpl = std::filesystem::temp_directory_path().string() + "/sp_redis_test_XXXXXX";
  if (!mkdtemp(tmpl.data())) return false;
  dir_ = tmpl;
  sock_ = dir_ + "/redis.sock";
  port_ = FreeTcpPort();
  std::vector<std::string> args = {server, "--port", std::to_string(port_),
                                   "--bind", "127.0.0.1", "--unixsocket", sock_,
                                   "--save", "", "--appendonly", "no", "--daemonize", "no",
                                   "--dir", dir_, "--enable-debug-command", "yes",
                                   "--loglevel", "warning"};
  args.insert(args.end(), extra.begin(), extra.end());
  // Built before fork: only async-signal-safe calls run in the child (the test may have threads).
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
  pid_ = fork();
  if (pid_ < 0) {
    if (devnull >= 0) close(devnull);
    return false;
  }
  if (pid_ == 0) {
    // Keep the test log readable: the server's banner and warnings go nowhere.
    if (devnull >= 0) {
      dup2(devnull, 1);
      dup2(devnull, 2);
    }
    execv(server, argv.data());
    _exit(127);
  }
  if (devnull >= 0) close(devnull);
  int64_t deadline = MonotonicUs() + 10'000'000;
  while (MonotonicUs() < deadline) {
    if (std::filesystem::exists(sock_)) {
      // NOAUTH errors still prove the server answers.
      auto c = SyncRedis::Connect(UnixUrl(), 1000);
      if (c.ok()) {
        auto r = (*c)->Command({"PING"});
        if (r.ok() || r.status().message().find("NOAUTH") != std::string::npos) return true;
      }
    }
    usleep(20'000);
  }
  return false;
}

TestRedisServer::~TestRedisServer() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

RedisUrl TestRedisServer::UnixUrl() const {
  RedisUrl u;
  u.unix_path = sock_;
  return u;
}

RedisUrl TestRedisServer::TcpUrl() const {
  RedisUrl u;
  u.host = "127.0.0.1";
  u.port = port_;
  return u;
}

std::unique_ptr<SyncRedis> MustConnect(const RedisUrl& u, int timeout_ms) {
  auto c = SyncRedis::Connect(u, timeout_ms);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? std::move(c).value() : nullptr;
}

}  // namespace sandpool
