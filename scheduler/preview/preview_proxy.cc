#include "scheduler/preview/preview_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "common/log.h"

namespace sandpool {
namespace {

constexpr const char* kBinaryName = "sandpool-preview-proxy";
constexpr int kReadyTimeoutMs = 10000;

const char* LevelName() {
  if (LogEnabled(LogLevel::kDebug)) return "debug";
  if (LogEnabled(LogLevel::kInfo)) return "info";
  if (LogEnabled(LogLevel::kWarn)) return "warn";
  return "error";
}

}  // namespace

UniqueFd OpenPreviewProxyBinary() {
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return UniqueFd();
  std::string dir(exe, static_cast<size_t>(n));
  dir = dir.substr(0, dir.rfind('/') + 1);
  // The build tree keeps it next to sandpoold; `cmake --install` puts it in lib/sandpool.
  for (const std::string& path : {dir + kBinaryName, dir + "../lib/sandpool/" + kBinaryName}) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd) return fd;
  }
  return UniqueFd();
}

Result<std::unique_ptr<PreviewProxy>> PreviewProxy::Start(const std::string& listen, uint32_t uid) {
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return Status::Error("--net-preview-listen must be address:port");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (inet_pton(AF_INET, listen.substr(0, colon).c_str(), &a.sin_addr) != 1) {
    return Status::Error("--net-preview-listen: not an IPv4 address: " + listen.substr(0, colon));
  }
  char* end = nullptr;
  unsigned long port = std::strtoul(listen.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port > 65535) return Status::Error("--net-preview-listen: bad port");
  a.sin_port = htons(static_cast<uint16_t>(port));
  UniqueFd binary = OpenPreviewProxyBinary();
  if (!binary) {
    return Status::Error(std::string("preview proxy: ") + kBinaryName +
                         " is neither next to sandpoold nor in ../lib/sandpool (it is built and installed with it)");
  }
  UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  int one = 1;
  ::setsockopt(sock.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (!sock || ::bind(sock.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(sock.get(), 256) != 0) {
    return ErrnoStatus("preview proxy: listen on " + listen);
  }
  socklen_t len = sizeof a;
  ::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&a), &len);
  auto pair = MakeSocketPair(SOCK_SEQPACKET);
  if (!pair.ok()) return pair.status();
  UniqueFd devnull(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!devnull) return ErrnoStatus("/dev/null");
  // Everything the child needs is made now: between fork and exec only raw system calls.
  std::string uid_text = std::to_string(uid);
  const char* args[] = {kBinaryName, "--uid", uid_text.c_str(), "--log-level", LevelName(), nullptr};
  const char* env[] = {nullptr};  // nothing of the daemon's environment
  const int exe = binary.get(), l = sock.get(), c = pair->b.get(), nul = devnull.get();
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus("fork");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // Out of the way first, so that no move overwrites another source; then 0 and 1 /dev/null,
    // 2 the daemon's log, 3 the listening socket, 4 the channel, 5 the binary (close-on-exec),
    // and nothing else.
    int e2 = ::fcntl(exe, F_DUPFD_CLOEXEC, 100), l2 = ::fcntl(l, F_DUPFD_CLOEXEC, 100);
    int c2 = ::fcntl(c, F_DUPFD_CLOEXEC, 100), n2 = ::fcntl(nul, F_DUPFD_CLOEXEC, 100);
    if (e2 < 0 || l2 < 0 || c2 < 0 || n2 < 0 || ::dup3(n2, 0, 0) < 0 || ::dup3(n2, 1, 0) < 0 || ::dup3(l2, 3, 0) < 0 ||
        ::dup3(c2, 4, 0) < 0 || ::dup3(e2, 5, O_CLOEXEC) < 0) {
      ::_exit(126);
    }
    ::syscall(SYS_close_range, 6, ~0U, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // The binary as opened at start-up, not a path looked up now.
    ::syscall(SYS_execveat, 5, "", const_cast<char* const*>(args), const_cast<char* const*>(env), AT_EMPTY_PATH);
    ::_exit(127);
  }
  std::unique_ptr<PreviewProxy> p(new PreviewProxy());
  p->channel_ = std::move(pair->a);
  p->pid_ = pid;
  p->port_ = ntohs(a.sin_port);
  // It says "ready" once it serves under its own uid and filter; anything else is a start-up
  // failure the operator hears about now rather than at the first request.
  pollfd pfd{p->channel_.get(), POLLIN, 0};
  char buf[16] = {};
  ssize_t got = -1;
  if (::poll(&pfd, 1, kReadyTimeoutMs) == 1) got = ::recv(p->channel_.get(), buf, sizeof buf, MSG_DONTWAIT);
  if (got != 5 || std::memcmp(buf, "ready", 5) != 0) {
    p->Stop();
    ::waitpid(pid, nullptr, 0);
    return Status::Error("preview proxy: the sandpool-preview-proxy process did not start (see its log line above)");
  }
  return p;
}

void PreviewProxy::Stop() {
  channel_.reset();
  if (pid_ > 0) ::kill(pid_, SIGKILL);  // the daemon reaps it (its child)
  pid_ = -1;
}

void PreviewProxy::Send(const std::string& message) {
  if (::send(channel_.get(), message.data(), message.size(), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
    LogWarn("preview proxy: route not sent", {{"error", ErrnoStatus("send").message()}});
  }
}

void PreviewProxy::Add(const std::string& token, uint32_t addr, uint16_t port) {
  Send("add " + token + " " + std::to_string(addr) + " " + std::to_string(port));
}

void PreviewProxy::Remove(const std::string& token) { Send("remove " + token); }

std::string NewPreviewToken() {
  uint8_t bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  static const char kBase32[] = "abcdefghijklmnopqrstuvwxyz234567";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (uint8_t b : bytes) {
    acc = (acc << 8) | b;
    bits += 8;
    while (bits >= 5) {
      out += kBase32[(acc >> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += kBase32[(acc << (5 - bits)) & 31];
  return out;
}

}  // namespace sandpool
