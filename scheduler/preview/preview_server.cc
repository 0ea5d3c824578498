#include "scheduler/preview/preview_server.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "common/clock.h"
#include "common/log.h"
#include "scheduler/preview/http_head.h"

namespace sandpool {
namespace {

constexpr size_t kMaxConnections = 1024;
constexpr size_t kSpliceHighWater = 256 * 1024;
constexpr int kHeadTimeoutS = 10, kIdleTimeoutS = 120, kConnectTimeoutS = 5;

struct Pair;

struct Route {
  std::string token;
  uint32_t addr = 0;
  uint16_t port = 0;
  std::set<Pair*> pairs;  // connections made through it: they end with it
};

struct Proxy {
  struct event_base* base = nullptr;
  uint64_t key[2] = {0, 0};  // of the keyed hash (random per process)
  // Keyed hash of the token -> its routes (more than one only when two tokens' hashes collide).
  std::multimap<uint64_t, Route> routes;
  size_t connections = 0;

  // FNV-1a over the key and the token: not a cryptographic hash, but its value, and so which
  // entries a lookup walks, depends on a key no client knows; equality is then decided by
  // ConstantTimeEquals alone.
  uint64_t Hash(std::string_view token) const {
    uint64_t h = 1469598103934665603ull ^ key[0];
    auto mix = [&h](uint8_t b) {
      h ^= b;
      h *= 1099511628211ull;
    };
    for (size_t i = 0; i < 8; ++i) mix(static_cast<uint8_t>(key[1] >> (8 * i)));
    for (char c : token) mix(static_cast<uint8_t>(c));
    return h ^ (h >> 29);
  }
  Route* Find(std::string_view token) {
    Route* found = nullptr;
    auto [lo, hi] = routes.equal_range(Hash(token));
    for (auto it = lo; it != hi; ++it) {
      if (ConstantTimeEquals(it->second.token, token)) found = &it->second;
    }
    return found;
  }
};

struct Pair {
  Proxy* proxy;
  struct bufferevent* client = nullptr;
  struct bufferevent* backend = nullptr;
  Route* route = nullptr;  // once the request named a live one
  std::string client_ip;
  int64_t head_deadline_us = 0;  // the whole head must arrive by then (not just each byte)
};

void FreePair(Pair* p) {
  if (p->client) bufferevent_free(p->client);
  if (p->backend) bufferevent_free(p->backend);
  if (p->route) p->route->pairs.erase(p);
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
  Route* route = split ? p->proxy->Find(split->first) : nullptr;
  if (route == nullptr) {
    Answer(p, "404 Not Found", "not found\n");  // the same for every unknown token
    return;
  }
  std::string rewritten = RewriteHttpHead(*head, split->second, route->port, p->client_ip, "/" + split->first);
  p->backend = bufferevent_socket_new(p->proxy->base, -1, BEV_OPT_CLOSE_ON_FREE);
  if (p->backend == nullptr) {
    Answer(p, "503 Service Unavailable", "busy\n");
    return;
  }
  p->route = route;
  route->pairs.insert(p);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(route->addr);
  to.sin_port = htons(route->port);
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

void RemoveRoute(Proxy* proxy, const std::string& token) {
  auto [lo, hi] = proxy->routes.equal_range(proxy->Hash(token));
  for (auto it = lo; it != hi; ++it) {
    if (!ConstantTimeEquals(it->second.token, token)) continue;
    // Its connections end with it: an unexposed port is unreachable, upgraded ones included.
    std::set<Pair*> pairs = std::move(it->second.pairs);
    for (Pair* p : pairs) {
      p->route = nullptr;
      FreePair(p);
    }
    proxy->routes.erase(it);
    return;
  }
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
      RemoveRoute(proxy, token);  // the same token again: the newer route
      Route r;
      r.token = token;
      r.addr = addr;
      r.port = static_cast<uint16_t>(port);
      proxy->routes.emplace(proxy->Hash(token), std::move(r));
    } else if (verb == "remove") {
      RemoveRoute(proxy, token);
    }
  }
}

}  // namespace

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Every byte of the longer is looked at whatever matched; the compiler may not stop early
  // (volatile accumulator).
  size_t n = a.size() > b.size() ? a.size() : b.size();
  volatile uint8_t diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    uint8_t x = i < a.size() ? static_cast<uint8_t>(a[i]) : 0;
    uint8_t y = i < b.size() ? static_cast<uint8_t>(b[i]) : 0;
    diff = static_cast<uint8_t>(diff | (x ^ y));
  }
  return diff == 0;
}

Status RunPreviewServer(int listen_fd, int channel_fd, Status (*before_serving)()) {
  Proxy proxy;
  if (::getrandom(proxy.key, sizeof proxy.key, 0) != static_cast<ssize_t>(sizeof proxy.key)) return ErrnoStatus("getrandom");
  proxy.base = event_base_new();
  if (proxy.base == nullptr) return Status::Error("event_base_new failed");
  // The channel first: routes added before a request arrives are in place when it is read.
  event_base_priority_init(proxy.base, 2);
  struct event* channel = event_new(proxy.base, channel_fd, EV_READ | EV_PERSIST, OnChannel, &proxy);
  if (channel == nullptr) return Status::Error("event_new failed");
  event_priority_set(channel, 0);
  event_add(channel, nullptr);
  struct evconnlistener* listener = evconnlistener_new(proxy.base, OnAccept, &proxy, LEV_OPT_CLOSE_ON_EXEC, 256, listen_fd);
  if (listener == nullptr) return Status::Error("cannot serve the listening socket");
  if (before_serving) SP_RETURN_IF_ERROR(before_serving());
  event_base_dispatch(proxy.base);
  return Status::Ok();  // the process exits now: nothing is freed on the way
}

}  // namespace sandpool
