#include "scheduler/preview_proxy.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <grp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fcntl.h>

#include <cstring>
#include <map>
#include <sstream>

#include "common/clock.h"
#include "common/log.h"
#include "scheduler/http_head.h"

namespace sandpool {
namespace {

constexpr size_t kMaxConnections = 1024;
constexpr size_t kSpliceHighWater = 256 * 1024;
constexpr int kHeadTimeoutS = 10, kIdleTimeoutS = 120, kConnectTimeoutS = 5;

struct Route {
  uint32_t addr;
  uint16_t port;
};

// ---- the proxy process ----

struct Proxy {
  struct event_base* base = nullptr;
  std::map<std::string, Route> routes;
  size_t connections = 0;
};

struct Pair {
  Proxy* proxy;
  struct bufferevent* client = nullptr;
  struct bufferevent* backend = nullptr;
  std::string client_ip;
  bool spliced = false;
  int64_t head_deadline_us = 0;  // the whole head must arrive by then (not just each byte)
};

void FreePair(Pair* p) {
  if (p->client) bufferevent_free(p->client);
  if (p->backend) bufferevent_free(p->backend);
  --p->proxy->connections;
  delete p;
}

// Closes once what is queued toward the client is written, or the client goes (reset, timeout:
// a client that stops reading cannot hold the connection).
void CloseWhenWritten(struct bufferevent* bev, void* arg) {
  if (evbuffer_get_length(bufferevent_get_output(bev)) == 0) FreePair(static_cast<Pair*>(arg));
}
void CloseOnEvent(struct bufferevent*, short what, void* arg) {
  if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) FreePair(static_cast<Pair*>(arg));
}

void Answer(Pair* p, const char* status, const char* body) {
  char buf[256];
  int n = std::snprintf(buf, sizeof buf, "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                        status, std::strlen(body), body);
  if (p->backend) {
    bufferevent_free(p->backend);
    p->backend = nullptr;
  }
  bufferevent_disable(p->client, EV_READ);
  timeval write{kHeadTimeoutS, 0};
  bufferevent_set_timeouts(p->client, nullptr, &write);
  bufferevent_setcb(p->client, nullptr, CloseWhenWritten, CloseOnEvent, p);
  bufferevent_write(p->client, buf, static_cast<size_t>(n));
}

struct bufferevent* Other(Pair* p, struct bufferevent* bev) { return bev == p->client ? p->backend : p->client; }

void SpliceRead(struct bufferevent* bev, void* arg);
void SpliceEvent(struct bufferevent* bev, short what, void* arg);

void DrainedResume(struct bufferevent* bev, void* arg) {
  auto* p = static_cast<Pair*>(arg);
  struct bufferevent* other = Other(p, bev);
  bufferevent_setcb(bev, SpliceRead, nullptr, SpliceEvent, p);
  bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
  if (other) bufferevent_enable(other, EV_READ);
}

void SpliceRead(struct bufferevent* bev, void* arg) {
  auto* p = static_cast<Pair*>(arg);
  struct bufferevent* other = Other(p, bev);
  if (other == nullptr) return;
  evbuffer_add_buffer(bufferevent_get_output(other), bufferevent_get_input(bev));
  if (evbuffer_get_length(bufferevent_get_output(other)) >= kSpliceHighWater) {
    // Back-pressure: stop reading this side until the other has written half of it.
    bufferevent_disable(bev, EV_READ);
    bufferevent_setwatermark(other, EV_WRITE, kSpliceHighWater / 2, kSpliceHighWater);
    bufferevent_setcb(other, SpliceRead, DrainedResume, SpliceEvent, p);
  }
}

void SpliceEvent(struct bufferevent* bev, short what, void* arg) {
  auto* p = static_cast<Pair*>(arg);
  if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT))) return;
  struct bufferevent* other = Other(p, bev);
  if (other) {
    SpliceRead(bev, p);  // whatever is left
    if (evbuffer_get_length(bufferevent_get_output(other)) > 0 && !(what & BEV_EVENT_TIMEOUT)) {
      // Let the other side finish writing, then close both.
      if (bev == p->client) {
        bufferevent_free(p->client);
        p->client = nullptr;
      } else {
        bufferevent_free(p->backend);
        p->backend = nullptr;
      }
      bufferevent_disable(other, EV_READ);
      bufferevent_setcb(other, nullptr, CloseWhenWritten, CloseOnEvent, p);
      return;
    }
  }
  FreePair(p);
}

void BackendEvent(struct bufferevent* bev, short what, void* arg) {
  auto* p = static_cast<Pair*>(arg);
  if (what & BEV_EVENT_CONNECTED) {
    p->spliced = true;
    timeval idle{kIdleTimeoutS, 0};
    bufferevent_set_timeouts(p->client, &idle, &idle);
    bufferevent_set_timeouts(bev, &idle, &idle);
    bufferevent_setcb(p->client, SpliceRead, nullptr, SpliceEvent, p);
    bufferevent_setcb(bev, SpliceRead, nullptr, SpliceEvent, p);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    bufferevent_enable(p->client, EV_READ | EV_WRITE);
    return;
  }
  Answer(p, "502 Bad Gateway", "nothing answers on this port in the session\n");
}

void ClientHead(struct bufferevent* bev, void* arg) {
  auto* p = static_cast<Pair*>(arg);
  struct evbuffer* in = bufferevent_get_input(bev);
  struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, nullptr);
  if (end.pos < 0 && MonotonicUs() > p->head_deadline_us) {
    Answer(p, "408 Request Timeout", "request head too slow\n");  // a byte now and then does not hold us
    return;
  }
  if (end.pos < 0) {
    if (evbuffer_get_length(in) > kMaxHttpHeadBytes) Answer(p, "431 Request Header Fields Too Large", "request head too large\n");
    return;
  }
  size_t n = static_cast<size_t>(end.pos) + 4;
  if (n > kMaxHttpHeadBytes) {
    Answer(p, "431 Request Header Fields Too Large", "request head too large\n");
    return;
  }
  std::string raw(n, '\0');
  evbuffer_remove(in, raw.data(), n);
  auto head = ParseHttpHead(raw);
  if (!head.ok()) {
    Answer(p, "400 Bad Request", "bad request\n");
    return;
  }
  auto split = SplitPreviewTarget(head->target);
  auto route = split ? p->proxy->routes.find(split->first) : p->proxy->routes.end();
  if (route == p->proxy->routes.end()) {
    Answer(p, "404 Not Found", "not found\n");  // the same for every unknown token
    return;
  }
  std::string rewritten = RewriteHttpHead(*head, split->second, route->second.port, p->client_ip, "/" + split->first);
  p->backend = bufferevent_socket_new(p->proxy->base, -1, BEV_OPT_CLOSE_ON_FREE);
  if (p->backend == nullptr) {
    Answer(p, "503 Service Unavailable", "busy\n");
    return;
  }
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(route->second.addr);
  to.sin_port = htons(route->second.port);
  bufferevent_disable(bev, EV_READ);  // until connected: the rest of the body stays queued
  bufferevent_setcb(p->backend, nullptr, nullptr, BackendEvent, p);
  timeval connect{kConnectTimeoutS, 0};
  bufferevent_set_timeouts(p->backend, nullptr, &connect);
  bufferevent_write(p->backend, rewritten.data(), rewritten.size());
  bufferevent_write_buffer(p->backend, in);
  if (bufferevent_socket_connect(p->backend, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    Answer(p, "502 Bad Gateway", "cannot connect\n");
  }
}

void ClientEarlyEvent(struct bufferevent*, short what, void* arg) {
  auto* p = static_cast<Pair*>(arg);
  if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) FreePair(p);
}

void OnAccept(struct evconnlistener*, evutil_socket_t fd, struct sockaddr* sa, int, void* arg) {
  auto* proxy = static_cast<Proxy*>(arg);
  if (proxy->connections >= kMaxConnections) {
    ::close(fd);
    return;
  }
  ++proxy->connections;
  auto* p = new Pair{proxy};
  char ip[INET6_ADDRSTRLEN] = "";
  if (sa->sa_family == AF_INET) inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(sa)->sin_addr, ip, sizeof ip);
  else if (sa->sa_family == AF_INET6) inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(sa)->sin6_addr, ip, sizeof ip);
  p->client_ip = ip;
  p->client = bufferevent_socket_new(proxy->base, fd, BEV_OPT_CLOSE_ON_FREE);
  if (p->client == nullptr) {
    ::close(fd);
    --proxy->connections;
    delete p;
    return;
  }
  p->head_deadline_us = MonotonicUs() + int64_t{kHeadTimeoutS} * 1000000;
  timeval head{kHeadTimeoutS, 0};
  bufferevent_set_timeouts(p->client, &head, &head);
  bufferevent_setcb(p->client, ClientHead, nullptr, ClientEarlyEvent, p);
  bufferevent_enable(p->client, EV_READ | EV_WRITE);
}

// "add <token> <addr> <port>" / "remove <token>", one per datagram.
void OnChannel(evutil_socket_t fd, short, void* arg) {
  auto* proxy = static_cast<Proxy*>(arg);
  for (;;) {
    char buf[256];
    ssize_t n = ::recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
    if (n == 0) {
      event_base_loopbreak(proxy->base);  // the daemon is gone
      return;
    }
    if (n < 0) return;
    std::istringstream in(std::string(buf, static_cast<size_t>(n)));
    std::string verb, token;
    in >> verb >> token;
    if (verb == "add") {
      uint32_t addr = 0, port = 0;
      in >> addr >> port;
      proxy->routes[token] = Route{addr, static_cast<uint16_t>(port)};
    } else if (verb == "remove") {
      proxy->routes.erase(token);
    }
  }
}

[[noreturn]] void ProxyMain(int listen_fd, int channel_fd, uint32_t uid) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);  // a terminal's ^C goes to the daemon, which ends us
  // Keep stdio, the listening socket (3) and the channel (4) only; out of the way first, so
  // that neither is overwritten by the other's move.
  int l = ::fcntl(listen_fd, F_DUPFD_CLOEXEC, 100), c = ::fcntl(channel_fd, F_DUPFD_CLOEXEC, 100);
  ::dup3(l, 3, O_CLOEXEC);
  ::dup3(c, 4, O_CLOEXEC);
  ::syscall(SYS_close_range, 5, ~0U, 0);
  if (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 || ::setresuid(uid, uid, uid) != 0 ||
      ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    LogError("preview proxy: cannot drop privileges", {{"error", ErrnoStatus("setresuid").message()}});
    ::_exit(1);
  }
  Proxy proxy;
  proxy.base = event_base_new();
  // The channel first: routes added before a request arrives are in place when it is read.
  event_base_priority_init(proxy.base, 2);
  struct event* channel = event_new(proxy.base, 4, EV_READ | EV_PERSIST, OnChannel, &proxy);
  event_priority_set(channel, 0);
  event_add(channel, nullptr);
  struct evconnlistener* listener = evconnlistener_new(proxy.base, OnAccept, &proxy, LEV_OPT_CLOSE_ON_EXEC, 256, 3);
  if (listener == nullptr) ::_exit(1);
  event_base_dispatch(proxy.base);
  ::_exit(0);
}

}  // namespace

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
  UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  int one = 1;
  ::setsockopt(sock.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (!sock || ::bind(sock.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(sock.get(), 256) != 0) {
    return ErrnoStatus("preview proxy: listen on " + listen);
  }
  socklen_t len = sizeof a;
  ::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&a), &len);
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return ErrnoStatus("socketpair");
  UniqueFd ours(pair[0]), theirs(pair[1]);
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus("fork");
  if (pid == 0) ProxyMain(sock.get(), theirs.get(), uid);
  std::unique_ptr<PreviewProxy> p(new PreviewProxy());
  p->channel_ = std::move(ours);
  p->pid_ = pid;
  p->port_ = ntohs(a.sin_port);
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
