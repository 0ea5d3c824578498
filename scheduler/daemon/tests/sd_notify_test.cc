#include "scheduler/daemon/sd_notify.h"

#include <event2/event.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

namespace sandpool {
namespace {

// A datagram socket bound where $NOTIFY_SOCKET will point: plays systemd's part.
struct Receiver {
  explicit Receiver(const std::string& name) {
    fd.reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, name.data(), name.size());
    socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
    if (name[0] == '@') addr.sun_path[0] = '\0';
    else len += 1;
    EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len), 0) << std::strerror(errno);
  }
  std::string Next() {
    char buf[512];
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    return n < 0 ? "" : std::string(buf, static_cast<size_t>(n));
  }
  UniqueFd fd;
};

std::string Abstract() { return "@sandpool-sd-test-" + std::to_string(::getpid()); }

TEST(SdNotify, WithoutNotifySocketSendsNothingAndNeedsNoWatchdog) {
  ::unsetenv("NOTIFY_SOCKET");
  ::setenv("WATCHDOG_USEC", "1000000", 1);
  auto n = SdNotify::FromEnvironment();
  ASSERT_TRUE(n.ok());
  EXPECT_FALSE((*n)->enabled());
  EXPECT_EQ(std::getenv("WATCHDOG_USEC"), nullptr);  // removed: children must not inherit it
}

TEST(SdNotify, SendsToAnAbstractSocketAndTakesTheVariablesOutOfTheEnvironment) {
  Receiver systemd(Abstract());
  ::setenv("NOTIFY_SOCKET", Abstract().c_str(), 1);
  ::setenv("WATCHDOG_USEC", "200000", 1);
  ::setenv("WATCHDOG_PID", std::to_string(::getpid()).c_str(), 1);
  auto n = SdNotify::FromEnvironment();
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_TRUE((*n)->enabled());
  EXPECT_EQ((*n)->watchdog_usec(), 200000u);
  EXPECT_EQ(std::getenv("NOTIFY_SOCKET"), nullptr);
  EXPECT_EQ(std::getenv("WATCHDOG_PID"), nullptr);
  (*n)->Send("READY=1\nSTATUS=up");
  EXPECT_EQ(systemd.Next(), "READY=1\nSTATUS=up");
}

TEST(SdNotify, WatchdogPingsComeFromTheLoopAtHalfTheInterval) {
  Receiver systemd(Abstract());
  ::setenv("NOTIFY_SOCKET", Abstract().c_str(), 1);
  ::setenv("WATCHDOG_USEC", "100000", 1);
  auto n = SdNotify::FromEnvironment();
  ASSERT_TRUE(n.ok());
  struct event_base* base = event_base_new();
  ASSERT_TRUE((*n)->StartWatchdog(base).ok());
  EXPECT_EQ(systemd.Next(), "WATCHDOG=1");  // one at once
  EXPECT_EQ(systemd.Next(), "");            // the next only when the loop runs
  struct timeval tv = {0, 400000};         // 50 ms ticks: 8 in 400 ms, fewer on a loaded machine
  event_base_loopexit(base, &tv);
  event_base_dispatch(base);
  int pings = 0;
  while (systemd.Next() == "WATCHDOG=1") ++pings;
  EXPECT_GE(pings, 2);
  EXPECT_LE(pings, 8);
  n->reset();  // its timer before its base
  event_base_free(base);
}

TEST(SdNotify, AnotherProcessesWatchdogIsNotOurs) {
  Receiver systemd(Abstract());
  ::setenv("NOTIFY_SOCKET", Abstract().c_str(), 1);
  ::setenv("WATCHDOG_USEC", "100000", 1);
  ::setenv("WATCHDOG_PID", "1", 1);
  auto n = SdNotify::FromEnvironment();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ((*n)->watchdog_usec(), 0u);
}

TEST(SdNotify, RefusesUnusableSockets) {
  ::setenv("NOTIFY_SOCKET", "relative/path", 1);
  EXPECT_FALSE(SdNotify::FromEnvironment().ok());
  ::setenv("NOTIFY_SOCKET", ("/" + std::string(200, 'x')).c_str(), 1);
  EXPECT_FALSE(SdNotify::FromEnvironment().ok());
  ::setenv("NOTIFY_SOCKET", "/run/x", 1);
  ::setenv("WATCHDOG_USEC", "soon", 1);
  EXPECT_FALSE(SdNotify::FromEnvironment().ok());
}

}  // namespace
}  // namespace sandpool
