#include "scheduler/daemon/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "common/log.h"

namespace sandpool {
namespace {

// The environment is read once, here, and the variables removed: a keeper or a sandbox that
// inherited NOTIFY_SOCKET could otherwise tell systemd the service is ready (or stopping).
std::string TakeEnv(const char* name) {
  const char* v = std::getenv(name);
  std::string value = v != nullptr ? v : "";
  ::unsetenv(name);
  return value;
}

bool ParseU64(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

}  // namespace

Result<std::unique_ptr<SdNotify>> SdNotify::FromEnvironment() {
  std::string socket = TakeEnv("NOTIFY_SOCKET");
  std::string usec = TakeEnv("WATCHDOG_USEC");
  std::string pid = TakeEnv("WATCHDOG_PID");
  std::unique_ptr<SdNotify> n(new SdNotify());
  if (socket.empty()) return n;
  if (socket[0] != '/' && socket[0] != '@') {
    return Status::Error("NOTIFY_SOCKET must be an absolute path or @abstract: " + socket);
  }
  if (socket.size() >= sizeof(sockaddr_un{}.sun_path)) return Status::Error("NOTIFY_SOCKET is too long: " + socket);
  n->address_ = socket;
  if (socket[0] == '@') n->address_[0] = '\0';
  uint64_t watchdog = 0, watchdog_pid = 0;
  if (!usec.empty() && !ParseU64(usec, &watchdog)) return Status::Error("WATCHDOG_USEC is not a number: " + usec);
  if (!pid.empty() && !ParseU64(pid, &watchdog_pid)) return Status::Error("WATCHDOG_PID is not a number: " + pid);
  // WATCHDOG_PID names the process systemd watches; another one's pings would be ignored.
  if (watchdog_pid != 0 && watchdog_pid != static_cast<uint64_t>(::getpid())) watchdog = 0;
  n->watchdog_usec_ = watchdog;
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return ErrnoStatus("notify socket");
  n->fd_.reset(fd);
  return n;
}

SdNotify::~SdNotify() {
  if (watchdog_ev_ != nullptr) event_free(watchdog_ev_);
}

void SdNotify::Send(std::string_view state) {
  if (!enabled()) return;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, address_.data(), address_.size());
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address_.size());
  // A path socket's address includes its terminating NUL; an abstract one is exactly its bytes.
  if (address_[0] != '\0') len += 1;
  ssize_t n = ::sendto(fd_.get(), state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr), len);
  if (n < 0 && !warned_) {
    warned_ = true;
    int err = errno;
    LogWarn("cannot notify systemd (further failures are not logged)",
            {{"error", ErrnoStatus("sendto NOTIFY_SOCKET", err).message()}});
  }
}

Status SdNotify::StartWatchdog(struct event_base* base) {
  if (!enabled() || watchdog_usec_ == 0 || watchdog_ev_ != nullptr) return Status::Ok();
  watchdog_ev_ = event_new(base, -1, EV_PERSIST, &SdNotify::OnWatchdogTimer, this);
  if (watchdog_ev_ == nullptr) return Status::Error("cannot create the watchdog timer");
  uint64_t half = watchdog_usec_ / 2;
  struct timeval tv = {static_cast<time_t>(half / 1000000), static_cast<suseconds_t>(half % 1000000)};
  if (event_add(watchdog_ev_, &tv) != 0) return Status::Error("cannot arm the watchdog timer");
  Send("WATCHDOG=1");
  LogInfo("systemd watchdog armed", {{"interval_ms", half / 1000}});
  return Status::Ok();
}

void SdNotify::OnWatchdogTimer(evutil_socket_t, short, void* arg) { static_cast<SdNotify*>(arg)->Send("WATCHDOG=1"); }

}  // namespace sandpool
