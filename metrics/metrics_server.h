// MetricsServer: the daemon's HTTP endpoints, served by libevent's evhttp on the daemon's own
// event loop (no extra thread, unlike prometheus-cpp's civetweb Exposer).
//
//   GET /metrics  200, Prometheus text format 0.0.4 (Content-Type text/plain; version=0.0.4)
//   GET /livez    200 "ok": answering at all proves the loop is turning
//   GET /readyz   200 "ready" when ready() returns true, else 503 with ready()'s reason
//   other paths   404; methods other than GET/HEAD are refused by evhttp (501)
//
// Lifetime: the server must be destroyed before `base`; `metrics` and `ready` must outlive it.
// Threading: everything runs on the thread that runs `base`.
// Hostile clients: headers are capped at 8 KiB, bodies at 1 KiB, and a connection idle for 10 s
// is closed, so a slow or oversized request cannot hold the loop or grow memory.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "metrics/metrics.h"

struct event_base;
struct evhttp;
struct evhttp_request;

namespace sandpool {

class MetricsServer {
 public:
  // Returns true when the daemon can take jobs; otherwise fills *why_not with a short reason
  // (shown in the 503 body). Called on the loop thread; must not block. An exception it throws
  // is caught and answered with 500.
  using ReadyFn = std::function<bool(std::string* why_not)>;

  // Listens on `host_port`: "127.0.0.1:9464", "0.0.0.0:9464", "[::1]:9464" or "localhost:9464"
  // (names are resolved with getaddrinfo, which may block briefly at start-up). Port 0 picks a
  // free port; BoundPort() reports it. Returns an error Status (never throws or aborts) for a
  // malformed address, an address in use, or any socket/evhttp failure.
  static Result<std::unique_ptr<MetricsServer>> Start(struct event_base* base,
                                                      const std::string& host_port,
                                                      const Metrics* metrics, ReadyFn ready);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int BoundPort() const { return port_; }

 private:
  MetricsServer(const Metrics* metrics, ReadyFn ready);
  static void OnRequest(struct evhttp_request* req, void* self);
  void Handle(struct evhttp_request* req);

  const Metrics* metrics_;
  ReadyFn ready_;
  struct evhttp* http_ = nullptr;
  int port_ = 0;
};

}  // namespace sandpool
