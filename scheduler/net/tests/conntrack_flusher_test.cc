#include "scheduler/net/conntrack_flusher.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "worker/sandbox/conntrack_flush.h"

namespace sandpool {
namespace {

// UDP from `from` to 10.9.0.9:9 on lo: one conntrack entry each (the ruleset below makes the
// namespace track connections).
bool SendFrom(const char* from) {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, from, &a.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);
  inet_pton(AF_INET, "10.9.0.9", &to.sin_addr);
  bool ok = s >= 0 && ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
            ::sendto(s, "x", 1, 0, reinterpret_cast<sockaddr*>(&to), sizeof to) == 1;
  if (s >= 0) ::close(s);
  return ok;
}

// In a child in a network namespace of its own: entries of two sources, the flush of one runs
// off the loop (Flush returns first), its callback comes on the loop, and only that source's
// entries are gone.
int FlushInPrivateNamespace() {
  if (::unshare(CLONE_NEWNET) != 0) return 10;
  if (std::system("ip link set lo up && ip addr add 10.9.0.1/32 dev lo && ip addr add 10.9.0.2/32 dev lo && "
                  "ip addr add 10.9.0.9/32 dev lo && "
                  "nft 'add table ip t; add chain ip t o { type filter hook output priority 0; ct state new accept; }'") != 0) {
    return 11;
  }
  if (!SendFrom("10.9.0.1") || !SendFrom("10.9.0.2")) return 12;
  struct event_base* base = event_base_new();
  int code = 0;
  {
    ConntrackFlusher flusher(base);
    bool called = false;
    Status result = Status::Error("not called");
    flusher.Flush(0x0a090001, [&](Status s) {
      called = true;
      result = std::move(s);
      event_base_loopbreak(base);
    });
    if (called) code = 13;  // never from inside Flush
    if (code == 0) event_base_dispatch(base);
    uint64_t left_a = 99, left_b = 0;
    if (code == 0 && (!called || !result.ok())) code = 14;
    if (code == 0 && (!FlushConntrackFrom(0x0a090001, &left_a).ok() || left_a != 0)) code = 15;
    if (code == 0 && (!FlushConntrackFrom(0x0a090002, &left_b).ok() || left_b != 1)) code = 16;
  }
  event_base_free(base);
  return code;
}

TEST(ConntrackFlusher, FlushesOneSourceOffTheLoopAndCallsBackOnIt) {
  if (::geteuid() != 0 || std::system("nft --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "needs root and nft";
  pid_t pid = ::fork();  // the test process has no threads: the child makes its own
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(FlushInPrivateNamespace());
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "step that failed: see FlushInPrivateNamespace's codes";
}

}  // namespace
}  // namespace sandpool
