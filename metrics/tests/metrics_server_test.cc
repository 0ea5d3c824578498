// MetricsServer against a real event loop and a hand-written HTTP client on a real socket. The
// test is single-threaded: the client's socket is one more event on the same loop, which
// breaks out when the server closes the connection.
#include "metrics/metrics_server.h"

#include <arpa/inet.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "common/fd.h"

namespace sandpool {
namespace {

struct BaseDeleter {
  void operator()(struct event_base* b) const { event_base_free(b); }
};
using BasePtr = std::unique_ptr<struct event_base, BaseDeleter>;

struct HttpResponse {
  int status = 0;
  std::string headers;  // raw header block, lines separated by \r\n
  std::string body;
  std::string Header(const std::string& name) const {
    size_t pos = headers.find("\r\n" + name + ": ");
    if (pos == std::string::npos) return "";
    pos += name.size() + 4;
    return headers.substr(pos, headers.find("\r\n", pos) - pos);
  }
};

struct ClientState {
  struct event_base* base;
  std::string in;
  bool done = false;
};

void OnClientReadable(evutil_socket_t fd, short what, void* arg) {
  auto* st = static_cast<ClientState*>(arg);
  if (what & EV_TIMEOUT) {
    st->done = true;
    event_base_loopbreak(st->base);
    return;
  }
  char buf[4096];
  ssize_t n = read(fd, buf, sizeof buf);
  if (n > 0) {
    st->in.append(buf, static_cast<size_t>(n));
    return;
  }
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  st->done = true;  // EOF (Connection: close) or an error
  event_base_loopbreak(st->base);
}

// Sends `raw` to 127.0.0.1:port and runs the loop until the server closes the connection.
HttpResponse Fetch(struct event_base* base, int port, const std::string& raw) {
  HttpResponse resp;
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_TRUE(fd.valid());
  struct sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // The listen backlog accepts the connection before the loop runs; the request is small
  // enough for the socket buffer, so blocking calls cannot deadlock here.
  if (connect(fd.get(), reinterpret_cast<struct sockaddr*>(&sa), sizeof sa) != 0) {
    ADD_FAILURE() << "connect: " << strerror(errno);
    return resp;
  }
  EXPECT_TRUE(WriteAll(fd.get(), raw.data(), raw.size()).ok());
  EXPECT_TRUE(SetNonBlocking(fd.get()).ok());

  ClientState st{base};
  struct event* ev = event_new(base, fd.get(), EV_READ | EV_PERSIST, OnClientReadable, &st);
  struct timeval tv = {5, 0};
  event_add(ev, &tv);
  while (!st.done) event_base_loop(base, EVLOOP_ONCE);
  event_free(ev);

  size_t sep = st.in.find("\r\n\r\n");
  if (sep == std::string::npos) {
    ADD_FAILURE() << "no complete response: " << st.in;
    return resp;
  }
  resp.headers = st.in.substr(0, sep + 2);
  resp.body = st.in.substr(sep + 4);
  // "HTTP/1.1 200 OK"
  if (st.in.rfind("HTTP/1.", 0) == 0 && st.in.size() > 12) resp.status = std::stoi(st.in.substr(9, 3));
  return resp;
}

HttpResponse Get(struct event_base* base, int port, const std::string& path) {
  return Fetch(base, port,
               "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
}

class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_.reset(event_base_new());
    ASSERT_NE(base_, nullptr);
    auto r = MetricsServer::Start(base_.get(), "127.0.0.1:0", &metrics_,
                                  [this](std::string* why) {
                                    if (!ready_) *why = "redis down";
                                    return ready_;
                                  });
    ASSERT_TRUE(r.ok()) << r.status().message();
    server_ = std::move(r).value();
    ASSERT_GT(server_->BoundPort(), 0);
  }
  void TearDown() override { server_.reset(); }  // before the base

  BasePtr base_;
  Metrics metrics_;
  bool ready_ = false;
  std::unique_ptr<MetricsServer> server_;
};

TEST_F(MetricsServerTest, MetricsEndpointServesTextFormat) {
  size_t t = metrics_.AddTemplate("default", 4);
  metrics_.JobReceived();
  metrics_.JobCompleted("default", "memory_limit");
  metrics_.ObserveRunDuration(t, 0.3);
  HttpResponse r = Get(base_.get(), server_->BoundPort(), "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.Header("Content-Type").rfind("text/plain; version=0.0.4", 0), 0u) << r.headers;
  EXPECT_NE(r.body.find("\nsandpool_jobs_received_total 1\n"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("sandpool_jobs_completed_total{outcome=\"memory_limit\",template=\"default\"} 1\n"),
            std::string::npos);
  EXPECT_NE(r.body.find("sandpool_job_run_seconds_bucket{template=\"default\",le=\"0.5\"} 1\n"), std::string::npos);
  EXPECT_NE(r.body.find("sandpool_job_run_seconds_count{template=\"default\"} 1\n"), std::string::npos);

  // Values move between scrapes; a query string does not change the route.
  metrics_.JobReceived();
  r = Get(base_.get(), server_->BoundPort(), "/metrics?x=1");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("\nsandpool_jobs_received_total 2\n"), std::string::npos);
}

TEST_F(MetricsServerTest, LivezAndReadyzFlip) {
  HttpResponse r = Get(base_.get(), server_->BoundPort(), "/livez");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ok\n");

  r = Get(base_.get(), server_->BoundPort(), "/readyz");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, "redis down\n");

  ready_ = true;
  r = Get(base_.get(), server_->BoundPort(), "/readyz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ready\n");

  ready_ = false;
  EXPECT_EQ(Get(base_.get(), server_->BoundPort(), "/readyz").status, 503);
}

TEST_F(MetricsServerTest, UnknownPathsAndMethods) {
  EXPECT_EQ(Get(base_.get(), server_->BoundPort(), "/").status, 404);
  EXPECT_EQ(Get(base_.get(), server_->BoundPort(), "/metrics/extra").status, 404);
  EXPECT_EQ(Get(base_.get(), server_->BoundPort(), "/../etc/passwd").status, 404);
  HttpResponse r = Fetch(base_.get(), server_->BoundPort(),
                         "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                         "Connection: close\r\n\r\n");
  EXPECT_EQ(r.status, 501);  // evhttp answers a method it was told to refuse with 501
  // Garbage instead of HTTP: the server answers 400 or closes; either way it keeps serving.
  Fetch(base_.get(), server_->BoundPort(), "\x01\x02 not http\r\n\r\n");
  EXPECT_EQ(Get(base_.get(), server_->BoundPort(), "/livez").status, 200);
}

TEST_F(MetricsServerTest, ThrowingReadyCallbackGives500) {
  auto r = MetricsServer::Start(base_.get(), "127.0.0.1:0", &metrics_,
                                [](std::string*) -> bool { throw std::runtime_error("boom"); });
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(Get(base_.get(), (*r)->BoundPort(), "/readyz").status, 500);
  EXPECT_EQ(Get(base_.get(), (*r)->BoundPort(), "/livez").status, 200);
}

TEST_F(MetricsServerTest, BindConflictIsAnError) {
  std::string addr = "127.0.0.1:" + std::to_string(server_->BoundPort());
  auto r = MetricsServer::Start(base_.get(), addr, &metrics_, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().sys_errno(), EADDRINUSE) << r.status().message();
  // The first server is unaffected.
  EXPECT_EQ(Get(base_.get(), server_->BoundPort(), "/livez").status, 200);
}

TEST(MetricsServerStart, InvalidAddressesAreErrors) {
  BasePtr base(event_base_new());
  Metrics m;
  for (const char* addr : {"", "nonsense", "127.0.0.1", "127.0.0.1:", "127.0.0.1:99999",
                           "127.0.0.1:-1", "127.0.0.1:80x", ":9464", "::1:9464", "[::1",
                           "[::1]9464", "300.1.1.1:0", "no-such-host.invalid:0",
                           "127.0.0.1:123456789012345678901234567890"}) {
    auto r = MetricsServer::Start(base.get(), addr, &m, nullptr);
    EXPECT_FALSE(r.ok()) << addr;
  }
  EXPECT_FALSE(MetricsServer::Start(nullptr, "127.0.0.1:0", &m, nullptr).ok());
  EXPECT_FALSE(MetricsServer::Start(base.get(), "127.0.0.1:0", nullptr, nullptr).ok());
}

TEST(MetricsServerStart, Ipv6LoopbackWorks) {
  BasePtr base(event_base_new());
  Metrics m;
  auto r = MetricsServer::Start(base.get(), "[::1]:0", &m, nullptr);
  if (!r.ok()) GTEST_SKIP() << "no IPv6 loopback: " << r.status().message();
  EXPECT_GT((*r)->BoundPort(), 0);
}

}  // namespace
}  // namespace sandpool
