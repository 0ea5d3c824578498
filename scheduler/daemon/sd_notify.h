// systemd's service notification protocol (sd_notify(3)) without libsystemd: one datagram of
// newline-separated VAR=value assignments to the unix socket named by $NOTIFY_SOCKET (a path, or
// "@name" for an abstract socket). deploy/systemd/sandpoold.service runs sandpoold as
// Type=notify with WatchdogSec=, and this is what tells systemd that the daemon is ready, what it
// is doing, that it is stopping, and that its event loop still turns.
//
// Contract:
//  - FromEnvironment() reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID and removes them from
//    the environment (nothing the daemon starts may talk to systemd in its name). Call it in
//    main, before anything forks. Without NOTIFY_SOCKET it returns a notifier that sends
//    nothing (enabled() false); an unusable NOTIFY_SOCKET (relative path, too long) is an error.
//  - Send() never blocks (the socket is non-blocking) and never fails the caller: a datagram
//    systemd did not take is logged once and dropped, as libsystemd does.
//  - StartWatchdog() arms a persistent timer on the daemon's libevent loop that sends WATCHDOG=1
//    every WATCHDOG_USEC/2. The ping comes from the loop itself, so a loop that is stuck (a
//    callback that never returns, a stopped process) sends none and systemd restarts the
//    service after WatchdogSec. Without WATCHDOG_USEC (or with a WATCHDOG_PID that is not this
//    process) it does nothing.
// Not thread-safe: loop thread only (the daemon has no other thread).
#pragma once

#include <event2/event.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/fd.h"
#include "common/status.h"

namespace sandpool {

class SdNotify {
 public:
  static Result<std::unique_ptr<SdNotify>> FromEnvironment();
  ~SdNotify();
  SdNotify(const SdNotify&) = delete;
  SdNotify& operator=(const SdNotify&) = delete;

  bool enabled() const { return fd_.valid(); }
  // 0 when systemd asked for no watchdog.
  uint64_t watchdog_usec() const { return watchdog_usec_; }
  // Sends `state` ("READY=1", "STATUS=...\nEXTEND_TIMEOUT_USEC=...") as one datagram.
  void Send(std::string_view state);
  Status StartWatchdog(struct event_base* base);

 private:
  SdNotify() = default;
  static void OnWatchdogTimer(evutil_socket_t, short, void* arg);

  UniqueFd fd_;
  std::string address_;  // sockaddr_un.sun_path bytes (abstract: leading NUL)
  uint64_t watchdog_usec_ = 0;
  bool warned_ = false;
  struct event* watchdog_ev_ = nullptr;
};

}  // namespace sandpool
