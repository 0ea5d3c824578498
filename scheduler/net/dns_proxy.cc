#include "scheduler/net/dns_proxy.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unbound-event.h>
#include <unbound.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "common/clock.h"
#include "common/fd.h"
#include "common/log.h"
#include "scheduler/net/dns_answer.h"
#include "scheduler/net/net_firewall.h"

namespace sandpool {
namespace {

constexpr size_t kMaxTcpConnections = 64;           // per template
constexpr size_t kMaxTcpConnectionsPerSandbox = 4;  // so that one sandbox cannot take them all
// Replies queued toward a client that does not read them: past this, its connection is closed
// (a reply is at most 64 KiB, so one whole reply always fits).
constexpr size_t kMaxTcpOutputBytes = 128 * 1024;
constexpr int kTcpIdleS = 10;

using Reply = std::function<void(std::vector<uint8_t>)>;

Result<std::pair<UniqueFd, UniqueFd>> BindPair() {
  for (int attempt = 0; attempt < 20; ++attempt) {
    UniqueFd udp(::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    UniqueFd tcp(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!udp || !tcp) return ErrnoStatus("socket");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (::bind(udp.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return ErrnoStatus("bind udp");
    socklen_t len = sizeof a;
    ::getsockname(udp.get(), reinterpret_cast<sockaddr*>(&a), &len);
    int one = 1;
    ::setsockopt(tcp.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(tcp.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return std::make_pair(std::move(udp), std::move(tcp));
    if (errno != EADDRINUSE) return ErrnoStatus("bind tcp");
  }
  return Status::Error("no port free for both UDP and TCP");
}

}  // namespace

struct DnsProxy::Impl {
  struct Bucket {
    double tokens = 0;
    int64_t at_us = 0;
  };
  struct Template {
    Impl* impl = nullptr;
    size_t index = 0;  // in plan.templates
    UniqueFd udp, tcp;
    struct event* udp_ev = nullptr;
    struct evconnlistener* listener = nullptr;
    size_t tcp_connections = 0;
    std::map<uint32_t, size_t> tcp_by_source;  // open TCP connections per sandbox address
  };
  struct Pending {
    Impl* impl;
    size_t t;
    std::vector<uint8_t> query;
    Reply reply;
    bool udp;
    NameVerdict verdict;
    std::string set;  // where its addresses are opened
    uint32_t src = 0;
    uint64_t generation = 0;  // the sandbox's policy generation when it asked
    int async_id = 0;
  };
  struct Narrowed {
    EgressPolicy policy;
    uint32_t slot;
  };
  std::map<uint32_t, Narrowed> narrowed;  // by sandbox address
  // Bumped whenever a sandbox address's policy changes: an answer to a question asked under
  // another policy (a previous job's, late on purpose) opens nothing.
  std::map<uint32_t, uint64_t> generations;
  bool closing = false;

  NetPlan* plan = nullptr;
  DnsOptions options;
  std::vector<std::unique_ptr<Template>> templates;
  struct event_base* base = nullptr;
  NetFirewall* firewall = nullptr;
  Metrics* metrics = nullptr;
  struct ub_ctx* ub = nullptr;
  std::map<uint32_t, Bucket> buckets;  // per sandbox address
  std::set<Pending*> pending;
  struct event* expire_ev = nullptr;  // once a second: opened addresses past their TTL close

  ~Impl() {
    if (expire_ev) event_free(expire_ev);
    // ub_ctx_delete answers every pending query (SERVFAIL) through OnResolved: ignored now.
    closing = true;
    if (ub) ub_ctx_delete(ub);
    for (Pending* p : pending) delete p;
    for (auto& t : templates) {
      if (t->udp_ev) event_free(t->udp_ev);
      if (t->listener) evconnlistener_free(t->listener);
    }
  }

  const NetPlan::Template& Tmpl(size_t t) const { return plan->templates[t]; }
  void Count(size_t t, const char* result) { metrics->NetDnsQuery(Tmpl(t).name, result); }

  bool Allow(uint32_t src) {
    int64_t now = MonotonicUs();
    if (buckets.size() > 65536) buckets.clear();  // addresses come from the pool: never this many
    Bucket& b = buckets[src];
    double burst = 2.0 * options.qps;
    if (b.at_us == 0) b.tokens = burst;
    b.tokens = std::min(burst, b.tokens + static_cast<double>(now - b.at_us) * options.qps / 1e6);
    b.at_us = now;
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }

  void Handle(size_t t, uint32_t src, std::vector<uint8_t> query, Reply reply, bool udp) {
    auto q = ParseDnsQuery(query);
    if (!q.ok()) {
      Count(t, "malformed");
      std::vector<uint8_t> r = LocalDnsReply(query, kRcodeFormErr);
      if (!r.empty()) reply(std::move(r));
      return;
    }
    if (!Allow(src)) {
      Count(t, "ratelimited");  // dropped: answering a flood would only feed it
      return;
    }
    auto narrow = narrowed.find(src);
    const EgressPolicy& policy = narrow != narrowed.end() ? narrow->second.policy : Tmpl(t).egress;
    std::string set = narrow != narrowed.end() ? SlotDynSet(narrow->second.slot) : DynSet(Tmpl(t).index);
    NameVerdict v = JudgeName(policy, q->name);
    if (!v.allowed) {
      Count(t, "denied");
      LogDebug("dns name refused", {{"template", Tmpl(t).name}, {"name", q->name}});
      reply(LocalDnsReply(query, kRcodeNxDomain));
      return;
    }
    if (q->qtype == kDnsTypeAAAA || q->qtype == kDnsTypeHTTPS || q->qtype == kDnsTypeSVCB) {
      Count(t, "nodata");
      reply(LocalDnsReply(query, kRcodeNoError));
      return;
    }
    if (q->qtype != kDnsTypeA) {
      Count(t, "type");
      reply(LocalDnsReply(query, kRcodeRefused));
      return;
    }
    auto* p = new Pending{this, t, std::move(query), std::move(reply), udp, std::move(v), std::move(set), src,
                          generations[src]};
    pending.insert(p);
    int rc = ub_resolve_event(ub, q->name.c_str(), kDnsTypeA, 1, p, &Impl::OnResolved, &p->async_id);
    if (rc != 0) {
      LogWarn("dns upstream query failed", {{"error", ub_strerror(rc)}});
      if (pending.erase(p)) {
        Count(t, "servfail");
        p->reply(LocalDnsReply(p->query, kRcodeServFail));
        delete p;
      }
    }
  }

  static void OnResolved(void* arg, int rcode, void* packet, int len, int, char*, int) {
    auto* p = static_cast<Pending*>(arg);
    Impl* self = p->impl;
    if (self->closing || !self->pending.erase(p)) return;
    std::unique_ptr<Pending> owned(p);
    if (self->generations[p->src] != p->generation) {
      self->Count(p->t, "servfail");  // asked under a policy that is no longer this sandbox's
      p->reply(LocalDnsReply(p->query, kRcodeServFail));
      return;
    }
    if (rcode != 0 || packet == nullptr || len <= 0) {
      self->Count(p->t, "servfail");
      p->reply(LocalDnsReply(p->query, kRcodeServFail));
      return;
    }
    const NameVerdict& v = p->verdict;
    auto refused = [&](uint32_t addr) { return AlwaysRefused(*self->plan, addr) || v.Filtered(addr); };
    FilteredAnswer a = FilterDnsAnswer(p->query, {static_cast<const uint8_t*>(packet), static_cast<size_t>(len)}, refused,
                                       self->options.ttl_min, self->options.ttl_max, p->udp);
    if (a.rcode == kRcodeRefused) {
      self->Count(p->t, "rebinding");
    } else if (!a.opened.empty()) {
      std::vector<NetFirewall::AddressGrant> grants;
      for (const OpenedAddress& o : a.opened) grants.push_back({o.addr, o.ttl, v.PortsFor(o.addr)});
      Status s = self->firewall->OpenAddresses(p->set, grants);
      if (!s.ok()) {
        LogWarn("cannot open resolved addresses", {{"error", s.message()}});
        self->Count(p->t, "servfail");
        p->reply(LocalDnsReply(p->query, kRcodeServFail));
        return;
      }
      self->Count(p->t, "allowed");
    } else {
      self->Count(p->t, a.rcode == kRcodeServFail ? "servfail" : "allowed");
    }
    p->reply(std::move(a.wire));
  }

  static void OnExpire(evutil_socket_t, short, void* arg) {
    Status s = static_cast<Impl*>(arg)->firewall->ExpireAddresses();
    if (!s.ok()) LogWarn("resolved addresses not closed", {{"error", s.message()}});
  }

  // ---- UDP ----
  static void OnUdp(evutil_socket_t fd, short, void* arg) {
    auto* t = static_cast<Template*>(arg);
    for (int i = 0; i < 64; ++i) {
      uint8_t buf[4096];
      sockaddr_in from{};
      socklen_t flen = sizeof from;
      ssize_t n = ::recvfrom(fd, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &flen);
      if (n < 0) return;
      uint32_t src = ntohl(from.sin_addr.s_addr);
      if (from.sin_family != AF_INET || !t->impl->plan->pool.Contains(Cidr{src, 32})) continue;  // only sandboxes
      int sock = fd;
      Reply reply = [sock, from](std::vector<uint8_t> r) {
        ::sendto(sock, r.data(), r.size(), MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&from), sizeof from);
      };
      t->impl->Handle(t->index, src, std::vector<uint8_t>(buf, buf + n), std::move(reply), true);
    }
  }

  // ---- TCP: two-byte length, then the message; several per connection ----
  struct Conn {
    Template* t;
    uint32_t src;
    struct bufferevent* bev;
    std::shared_ptr<Conn>* holder = nullptr;  // the bufferevent callbacks' reference
    bool closed = false;
  };

  static void CloseConn(const std::shared_ptr<Conn>& c) {
    if (c->closed) return;
    c->closed = true;
    bufferevent_free(c->bev);
    --c->t->tcp_connections;
    auto it = c->t->tcp_by_source.find(c->src);
    if (it != c->t->tcp_by_source.end() && --it->second == 0) c->t->tcp_by_source.erase(it);
    delete c->holder;  // `c` is the caller's reference
  }

  static void OnAccept(struct evconnlistener*, evutil_socket_t fd, struct sockaddr* sa, int, void* arg) {
    auto* t = static_cast<Template*>(arg);
    auto* in = reinterpret_cast<sockaddr_in*>(sa);
    uint32_t src = ntohl(in->sin_addr.s_addr);
    if (in->sin_family != AF_INET || !t->impl->plan->pool.Contains(Cidr{src, 32}) ||
        t->tcp_connections >= kMaxTcpConnections || t->tcp_by_source[src] >= kMaxTcpConnectionsPerSandbox) {
      if (t->tcp_by_source[src] == 0) t->tcp_by_source.erase(src);
      ::close(fd);
      return;
    }
    ++t->tcp_connections;
    ++t->tcp_by_source[src];
    auto c = std::make_shared<Conn>(Conn{t, src, bufferevent_socket_new(t->impl->base, fd, BEV_OPT_CLOSE_ON_FREE)});
    c->holder = new std::shared_ptr<Conn>(c);
    timeval idle{kTcpIdleS, 0};
    bufferevent_set_timeouts(c->bev, &idle, &idle);
    bufferevent_setcb(c->bev, &Impl::OnTcpRead, nullptr, &Impl::OnTcpEvent, c->holder);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
  }

  static void OnTcpRead(struct bufferevent* bev, void* arg) {
    auto c = *static_cast<std::shared_ptr<Conn>*>(arg);
    struct evbuffer* in = bufferevent_get_input(bev);
    for (;;) {
      uint8_t head[2];
      if (evbuffer_copyout(in, head, 2) != 2) return;
      size_t n = (size_t{head[0]} << 8) | head[1];
      if (evbuffer_get_length(in) < 2 + n) return;
      std::vector<uint8_t> msg(n);
      evbuffer_drain(in, 2);
      evbuffer_remove(in, msg.data(), n);
      std::weak_ptr<Conn> weak = c;
      Reply reply = [weak](std::vector<uint8_t> r) {
        auto conn = weak.lock();
        if (!conn || conn->closed || r.size() > 65535) return;
        if (evbuffer_get_length(bufferevent_get_output(conn->bev)) + 2 + r.size() > kMaxTcpOutputBytes) {
          CloseConn(conn);  // it asks and does not read: no more memory of ours for it
          return;
        }
        uint8_t len[2] = {static_cast<uint8_t>(r.size() >> 8), static_cast<uint8_t>(r.size())};
        bufferevent_write(conn->bev, len, 2);
        bufferevent_write(conn->bev, r.data(), r.size());
      };
      c->t->impl->Handle(c->t->index, c->src, std::move(msg), std::move(reply), false);
      if (c->closed) return;
    }
  }

  static void OnTcpEvent(struct bufferevent*, short, void* arg) {
    std::shared_ptr<Conn> c = *static_cast<std::shared_ptr<Conn>*>(arg);
    CloseConn(c);
  }
};

DnsProxy::DnsProxy(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DnsProxy::~DnsProxy() = default;

Result<std::unique_ptr<DnsProxy>> DnsProxy::Bind(NetPlan* plan, const DnsOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->plan = plan;
  impl->options = options;
  for (size_t i = 0; i < plan->templates.size(); ++i) {
    auto socks = BindPair();
    if (!socks.ok()) return socks.status().Prefixed("resolver of template " + plan->templates[i].name);
    sockaddr_in a{};
    socklen_t len = sizeof a;
    ::getsockname(socks->first.get(), reinterpret_cast<sockaddr*>(&a), &len);
    plan->templates[i].dns_port = ntohs(a.sin_port);
    auto t = std::make_unique<Impl::Template>();
    t->impl = impl.get();
    t->index = i;
    t->udp = std::move(socks->first);
    t->tcp = std::move(socks->second);
    impl->templates.push_back(std::move(t));
  }
  return std::unique_ptr<DnsProxy>(new DnsProxy(std::move(impl)));
}

void DnsProxy::SetSlotPolicy(uint32_t sandbox_addr, uint32_t slot, const EgressPolicy* policy) {
  ++impl_->generations[sandbox_addr];
  if (policy) impl_->narrowed[sandbox_addr] = Impl::Narrowed{*policy, slot};
  else impl_->narrowed.erase(sandbox_addr);
}

Status DnsProxy::Start(struct event_base* base, NetFirewall* firewall, Metrics* metrics) {
  Impl& m = *impl_;
  m.base = base;
  m.firewall = firewall;
  m.metrics = metrics;
  m.ub = ub_ctx_create_event(base);
  if (m.ub == nullptr) return Status::Error("libunbound: cannot create an event context");
  // Forward only: a resolver the operator trusts does the recursion. No IPv6 transport, no
  // DNSSEC validation (no trust anchor: answers are used as the upstream gives them).
  int rc = ub_ctx_set_option(m.ub, "do-ip6:", "no");
  if (rc == 0) rc = ub_ctx_set_option(m.ub, "do-not-query-localhost:", "no");  // 127.0.0.53 and friends
  if (rc != 0) return Status::Error(std::string("libunbound: ") + ub_strerror(rc));
  if (m.options.upstream.empty()) {
    rc = ub_ctx_resolvconf(m.ub, nullptr);
    if (rc != 0) return Status::Error(std::string("libunbound: reading /etc/resolv.conf: ") + ub_strerror(rc));
  } else {
    std::istringstream words(m.options.upstream);
    for (std::string w; words >> w;) {
      rc = ub_ctx_set_fwd(m.ub, w.c_str());
      if (rc != 0) return Status::Error("--net-dns-upstream " + w + ": " + ub_strerror(rc));
    }
  }
  m.expire_ev = event_new(base, -1, EV_PERSIST, &Impl::OnExpire, &m);
  timeval second{1, 0};
  if (m.expire_ev == nullptr || event_add(m.expire_ev, &second) != 0) return Status::Error("dns: event_add failed");
  for (auto& t : m.templates) {
    t->udp_ev = event_new(base, t->udp.get(), EV_READ | EV_PERSIST, &Impl::OnUdp, t.get());
    if (t->udp_ev == nullptr || event_add(t->udp_ev, nullptr) != 0) return Status::Error("dns: event_add failed");
    t->listener = evconnlistener_new(base, &Impl::OnAccept, t.get(), LEV_OPT_CLOSE_ON_EXEC, 64, t->tcp.get());
    if (t->listener == nullptr) return Status::Error("dns: cannot listen on TCP");
  }
  return Status::Ok();
}

}  // namespace sandpool
