#include "metrics/metrics_server.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <exception>
#include <string_view>

#include "common/fd.h"
#include "common/log.h"

namespace sandpool {
namespace {

constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";
constexpr char kTextContentType[] = "text/plain; charset=utf-8";

struct HostPort {
  std::string host;
  std::string port;
};

// "host:port" or "[v6]:port". A bare IPv6 address is refused: "::1:80" is ambiguous.
Result<HostPort> ParseHostPort(const std::string& s) {
  auto bad = [&s](std::string_view why) {
    return Status::Error("metrics listen address \"" + s + "\": " + std::string(why));
  };
  HostPort hp;
  size_t colon;
  if (!s.empty() && s[0] == '[') {
    size_t close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':') {
      return bad("expected [ipv6]:port");
    }
    hp.host = s.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = s.rfind(':');
    if (colon == std::string::npos) return bad("expected host:port");
    hp.host = s.substr(0, colon);
    if (hp.host.find(':') != std::string::npos) return bad("put an IPv6 address in brackets");
  }
  hp.port = s.substr(colon + 1);
  if (hp.host.empty()) return bad("empty host");
  if (hp.port.empty() || hp.port.size() > 5 ||
      hp.port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(hp.port) > 65535) {
    return bad("port must be 0-65535");
  }
  return hp;
}

// A listening, non-blocking, close-on-exec TCP socket bound to `hp`, and its port.
Result<UniqueFd> Listen(const HostPort& hp, const std::string& what, int* port) {
  struct addrinfo hints;
  std::memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  struct addrinfo* res = nullptr;
  int rc = getaddrinfo(hp.host.c_str(), hp.port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return Status::Error("metrics listen address \"" + what + "\": " + gai_strerror(rc));
  }
  // Only the first address: binding one name to several sockets would make BoundPort ambiguous.
  std::unique_ptr<struct addrinfo, decltype(&freeaddrinfo)> guard(res, &freeaddrinfo);

  UniqueFd fd(socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoStatus("metrics socket");
  // Lets a restarted daemon rebind while old connections sit in TIME_WAIT. On Linux it does not
  // allow binding a port another socket is listening on, so a conflict is still reported.
  int one = 1;
  if (setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
    return ErrnoStatus("metrics setsockopt(SO_REUSEADDR)");
  }
  if (bind(fd.get(), res->ai_addr, res->ai_addrlen) != 0) {
    return ErrnoStatus("metrics bind " + what);
  }
  if (listen(fd.get(), 64) != 0) return ErrnoStatus("metrics listen " + what);

  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getsockname(fd.get(), reinterpret_cast<struct sockaddr*>(&ss), &len) != 0) {
    return ErrnoStatus("metrics getsockname");
  }
  if (ss.ss_family == AF_INET) {
    *port = ntohs(reinterpret_cast<struct sockaddr_in*>(&ss)->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    *port = ntohs(reinterpret_cast<struct sockaddr_in6*>(&ss)->sin6_port);
  } else {
    return Status::Error("metrics listen address \"" + what + "\": not an IP address");
  }
  return fd;
}

void Reply(struct evhttp_request* req, int code, const char* reason, const char* content_type,
           std::string_view body) {
  struct evkeyvalq* headers = evhttp_request_get_output_headers(req);
  evhttp_add_header(headers, "Content-Type", content_type);
  evhttp_add_header(headers, "Cache-Control", "no-store");
  struct evbuffer* buf = evbuffer_new();
  if (buf == nullptr) {
    evhttp_send_error(req, HTTP_INTERNAL, nullptr);
    return;
  }
  evbuffer_add(buf, body.data(), body.size());
  evhttp_send_reply(req, code, reason, buf);
  evbuffer_free(buf);
}

}  // namespace

MetricsServer::MetricsServer(const Metrics* metrics, ReadyFn ready)
    : metrics_(metrics), ready_(std::move(ready)) {}

MetricsServer::~MetricsServer() {
  // Frees the listener (closing its fd) and every open connection.
  if (http_ != nullptr) evhttp_free(http_);
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(struct event_base* base,
                                                            const std::string& host_port,
                                                            const Metrics* metrics,
                                                            ReadyFn ready) {
  if (base == nullptr || metrics == nullptr) {
    return Status::Error("metrics server: null event base or metrics");
  }
  try {
    Result<HostPort> hp = ParseHostPort(host_port);
    if (!hp.ok()) return hp.status();
    int port = 0;
    Result<UniqueFd> fd = Listen(*hp, host_port, &port);
    if (!fd.ok()) return fd.status();

    std::unique_ptr<MetricsServer> server(new MetricsServer(metrics, std::move(ready)));
    server->http_ = evhttp_new(base);
    if (server->http_ == nullptr) return Status::Error("metrics server: evhttp_new failed");
    server->port_ = port;
    evhttp_set_allowed_methods(server->http_, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    evhttp_set_max_headers_size(server->http_, 8 * 1024);
    evhttp_set_max_body_size(server->http_, 1024);
    evhttp_set_timeout(server->http_, 10);
    evhttp_set_gencb(server->http_, &MetricsServer::OnRequest, server.get());
    // On success evhttp owns the fd (its listener closes it on free); on failure we still do.
    if (evhttp_accept_socket_with_handle(server->http_, fd->get()) == nullptr) {
      return Status::Error("metrics server: evhttp_accept_socket failed for " + host_port);
    }
    fd->release();
    LogInfo("metrics server listening", {{"address", host_port}, {"port", port}});
    return server;
  } catch (const std::exception& e) {  // std::bad_alloc, std::stoul's out_of_range, ...
    return Status::Error(std::string("metrics server: ") + e.what());
  }
}

void MetricsServer::OnRequest(struct evhttp_request* req, void* self) {
  // No exception may unwind through libevent's C frames.
  try {
    static_cast<MetricsServer*>(self)->Handle(req);
  } catch (const std::exception& e) {
    LogError("metrics request failed", {{"error", e.what()}});
    evhttp_send_error(req, HTTP_INTERNAL, nullptr);
  } catch (...) {
    LogError("metrics request failed", {{"error", "unknown exception"}});
    evhttp_send_error(req, HTTP_INTERNAL, nullptr);
  }
}

void MetricsServer::Handle(struct evhttp_request* req) {
  const struct evhttp_uri* uri = evhttp_request_get_evhttp_uri(req);
  const char* raw_path = uri != nullptr ? evhttp_uri_get_path(uri) : nullptr;
  std::string_view path = raw_path != nullptr ? raw_path : "";

  if (path == "/metrics") {
    Reply(req, HTTP_OK, "OK", kMetricsContentType, metrics_->Serialize());
  } else if (path == "/livez") {
    Reply(req, HTTP_OK, "OK", kTextContentType, "ok\n");
  } else if (path == "/readyz") {
    std::string why;
    bool ready = ready_ ? ready_(&why) : true;
    if (ready) {
      Reply(req, HTTP_OK, "OK", kTextContentType, "ready\n");
    } else {
      if (why.empty()) why = "not ready";
      // The reason comes from our own code, but keep the body one short line regardless.
      if (why.size() > 200) why.resize(200);
      why.push_back('\n');
      Reply(req, HTTP_SERVUNAVAIL, "Service Unavailable", kTextContentType, why);
    }
  } else {
    Reply(req, HTTP_NOTFOUND, "Not Found", kTextContentType, "not found\n");
  }
}

}  // namespace sandpool
