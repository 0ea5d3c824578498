#include "worker/sandbox/netns_setup.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/inet6.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/qdisc.h>
#include <netlink/route/qdisc/tbf.h>
#include <netlink/route/tc.h>
#include <netlink/route/route.h>
#include <nftables/libnftables.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "common/fd.h"

namespace sandpool {
namespace {

Status NlError(const std::string& what, int err) {
  return Status::Error(what + ": " + nl_geterror(err));
}

// Owners for libnl's reference-counted objects.
struct LinkRef {
  struct rtnl_link* p = nullptr;
  ~LinkRef() { if (p) rtnl_link_put(p); }
};
struct AddrRef {
  struct nl_addr* p = nullptr;
  ~AddrRef() { if (p) nl_addr_put(p); }
};

Result<struct nl_sock*> Connect() {
  struct nl_sock* s = nl_socket_alloc();
  if (s == nullptr) return Status::Error("nl_socket_alloc failed");
  int e = nl_connect(s, NETLINK_ROUTE);
  if (e < 0) {
    nl_socket_free(s);
    return NlError("netlink connect", e);
  }
  // libnl's sockets are not O_CLOEXEC; sandboxes are cloned from this keeper.
  ::fcntl(nl_socket_get_fd(s), F_SETFD, FD_CLOEXEC);
  return s;
}

AddrRef Ipv4(uint32_t host_order, int prefix) {
  uint32_t be = htonl(host_order);
  AddrRef a{nl_addr_build(AF_INET, &be, sizeof be)};
  if (a.p) nl_addr_set_prefixlen(a.p, prefix);
  return a;
}

Status AddAddress(struct nl_sock* s, int ifindex, uint32_t addr) {
  AddrRef local = Ipv4(addr, 31);
  struct rtnl_addr* a = rtnl_addr_alloc();
  if (a == nullptr || local.p == nullptr) return Status::Error("out of memory");
  rtnl_addr_set_ifindex(a, ifindex);
  rtnl_addr_set_local(a, local.p);
  int e = rtnl_addr_add(s, a, 0);
  rtnl_addr_put(a);
  return e < 0 ? NlError("address", e) : Status::Ok();
}

// Applies `change` (flags, IPv6 generation mode ...) to the link named `name`.
Status ChangeLink(struct nl_sock* s, const char* name, struct rtnl_link* change, int* ifindex = nullptr) {
  LinkRef old;
  int e = rtnl_link_get_kernel(s, 0, name, &old.p);
  if (e < 0) return NlError(std::string("find ") + name, e);
  if (ifindex) *ifindex = rtnl_link_get_ifindex(old.p);
  e = rtnl_link_change(s, old.p, change, 0);
  return e < 0 ? NlError(std::string("change ") + name, e) : Status::Ok();
}

Status Up(struct nl_sock* s, const char* name, int* ifindex) {
  LinkRef chg{rtnl_link_alloc()};
  rtnl_link_set_flags(chg.p, IFF_UP);
  return ChangeLink(s, name, chg.p, ifindex);
}

Status DefaultRoute(struct nl_sock* s, int ifindex, uint32_t gateway) {
  AddrRef dst = Ipv4(0, 0);
  AddrRef gw = Ipv4(gateway, 32);
  struct rtnl_route* r = rtnl_route_alloc();
  struct rtnl_nexthop* nh = rtnl_route_nh_alloc();
  if (r == nullptr || nh == nullptr || dst.p == nullptr || gw.p == nullptr) return Status::Error("out of memory");
  rtnl_route_set_family(r, AF_INET);
  rtnl_route_set_dst(r, dst.p);
  rtnl_route_nh_set_ifindex(nh, ifindex);
  rtnl_route_nh_set_gateway(nh, gw.p);
  rtnl_route_add_nexthop(r, nh);  // the route owns it now
  int e = rtnl_route_add(s, r, NLM_F_CREATE);
  rtnl_route_put(r);
  return e < 0 ? NlError("default route", e) : Status::Ok();
}

// Makes "eth0" here with its peer `peer_name` in the namespace of `host_ns`.
int AddPair(struct nl_sock* in, const std::string& peer_name, int host_ns) {
  struct rtnl_link* veth = rtnl_link_veth_alloc();
  if (veth == nullptr) return -NLE_NOMEM;
  rtnl_link_set_name(veth, "eth0");
  struct rtnl_link* peer = rtnl_link_veth_get_peer(veth);
  rtnl_link_set_name(peer, peer_name.c_str());
  rtnl_link_set_ns_fd(peer, host_ns);
  rtnl_link_put(peer);  // get_peer took a reference
  int e = rtnl_link_add(in, veth, NLM_F_CREATE | NLM_F_EXCL);
  rtnl_link_veth_release(veth);
  return e;
}

// A token bucket on `ifindex`'s egress: `rate` bytes/s, a burst of 1/8 s of it (at least
// 64 KiB), packets waiting at most 50 ms (then dropped: TCP slows down to the rate).
Status LimitRate(struct nl_sock* s, int ifindex, uint64_t rate) {
  struct rtnl_qdisc* q = rtnl_qdisc_alloc();
  if (q == nullptr) return Status::Error("out of memory");
  int bucket = static_cast<int>(std::max<uint64_t>(64 * 1024, rate / 8));
  rtnl_tc_set_ifindex(TC_CAST(q), ifindex);
  rtnl_tc_set_parent(TC_CAST(q), TC_H_ROOT);
  rtnl_tc_set_handle(TC_CAST(q), TC_HANDLE(1, 0));
  int e = rtnl_tc_set_kind(TC_CAST(q), "tbf");
  if (e == 0) {
    rtnl_qdisc_tbf_set_rate(q, static_cast<int>(std::min<uint64_t>(rate, 0x7fffffff)), bucket, 0);
    e = rtnl_qdisc_tbf_set_limit_by_latency(q, 50000);
  }
  if (e == 0) e = rtnl_qdisc_add(s, q, NLM_F_CREATE | NLM_F_REPLACE);
  rtnl_qdisc_put(q);
  return e < 0 ? NlError("tbf qdisc", e) : Status::Ok();
}

Status WriteSysctl(const char* path, const char* value) {
  UniqueFd f(::open(path, O_WRONLY | O_CLOEXEC));
  if (!f) return errno == ENOENT ? Status::Ok() : ErrnoStatus(path);  // no IPv6 in this kernel: nothing to turn off
  size_t n = std::char_traits<char>::length(value);
  if (::write(f.get(), value, n) != static_cast<ssize_t>(n)) return ErrnoStatus(path);
  return Status::Ok();
}

Status HandOverToLoopback() {
  // New TCP connections arriving on eth0 go to 127.0.0.1 (same port): a server bound to
  // localhost or to every address answers the preview proxy alike. Only the proxy's
  // connections arrive new on eth0 (the daemon's table drops every other). The sandbox cannot
  // change this table: the namespace's owner is the initial user namespace.
  SP_RETURN_IF_ERROR(WriteSysctl("/proc/sys/net/ipv4/conf/eth0/route_localnet", "1"));
  struct nft_ctx* nft = nft_ctx_new(NFT_CTX_DEFAULT);
  if (nft == nullptr) return Status::Error("nft_ctx_new failed");
  nft_ctx_buffer_error(nft);
  int rc = nft_run_cmd_from_buffer(nft,
                                   "table ip sandpool_slot {\n"
                                   "  chain prerouting { type nat hook prerouting priority dstnat; policy accept;\n"
                                   "    iifname \"eth0\" meta l4proto tcp ct state new dnat to 127.0.0.1\n"
                                   "  }\n"
                                   "}\n");
  std::string err = rc == 0 ? "" : nft_ctx_get_error_buffer(nft);
  nft_ctx_free(nft);
  return rc == 0 ? Status::Ok() : Status::Error("slot nat table: " + err);
}

}  // namespace

struct HostNetlink::Impl {
  struct nl_sock* host = nullptr;
  UniqueFd host_ns;
  ~Impl() { if (host) nl_socket_free(host); }
};

HostNetlink::HostNetlink(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HostNetlink::HostNetlink(HostNetlink&&) noexcept = default;
HostNetlink& HostNetlink::operator=(HostNetlink&&) noexcept = default;
HostNetlink::~HostNetlink() = default;

Result<HostNetlink> HostNetlink::Open() {
  auto impl = std::make_unique<Impl>();
  impl->host_ns = UniqueFd(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!impl->host_ns) return ErrnoStatus("open /proc/self/ns/net");
  auto s = Connect();
  if (!s.ok()) return s.status();
  impl->host = *s;
  return HostNetlink(std::move(impl));
}

Status HostNetlink::ConnectSlot(const SlotNetwork& net, uint32_t slot) {
  const std::string peer = net.host_if_prefix + std::to_string(slot);
  if (peer.size() >= IFNAMSIZ) return Status::Error("interface name too long: " + peer);
  // Before eth0 exists, so it is born without IPv6 (lo keeps ::1).
  SP_RETURN_IF_ERROR(WriteSysctl("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1"));
  auto in = Connect();  // in the slot's namespace, where the caller now is
  if (!in.ok()) return in.status();
  struct Closer {
    struct nl_sock* s;
    ~Closer() { nl_socket_free(s); }
  } closer{*in};

  int e = AddPair(*in, peer, impl_->host_ns.get());
  if (e == -NLE_EXIST) {
    // The previous keeper of this slot is gone, but the kernel tears its namespace (and the
    // pair in it) down asynchronously. Deleting the host end deletes the pair.
    LinkRef stale{rtnl_link_alloc()};
    rtnl_link_set_name(stale.p, peer.c_str());
    int d = rtnl_link_delete(impl_->host, stale.p);
    if (d < 0 && d != -NLE_NODEV && d != -NLE_OBJ_NOTFOUND) return NlError("delete stale " + peer, d);
    e = AddPair(*in, peer, impl_->host_ns.get());
  }
  if (e < 0) return NlError("veth pair " + peer, e);

  // Host end: no IPv6 address generation (a separate change, before it is up: in the create
  // request it is ignored), its address, up.
  {
    LinkRef chg{rtnl_link_alloc()};
    rtnl_link_inet6_set_addr_gen_mode(chg.p, 1 /* IN6_ADDR_GEN_MODE_NONE */);
    Status s = ChangeLink(impl_->host, peer.c_str(), chg.p);
    // A host without IPv6 has no such attribute to set, and no IPv6 to fear.
    if (!s.ok() && ::access("/proc/sys/net/ipv6", F_OK) == 0) return s;
  }
  int host_index = 0, slot_index = 0;
  {
    LinkRef h;
    e = rtnl_link_get_kernel(impl_->host, 0, peer.c_str(), &h.p);
    if (e < 0) return NlError("host end " + peer, e);
    host_index = rtnl_link_get_ifindex(h.p);
  }
  SP_RETURN_IF_ERROR(AddAddress(impl_->host, host_index, HostEndAddress(net, slot)).Prefixed(peer));
  SP_RETURN_IF_ERROR(Up(impl_->host, peer.c_str(), nullptr));
  SP_RETURN_IF_ERROR(Up(*in, "eth0", &slot_index));
  SP_RETURN_IF_ERROR(AddAddress(*in, slot_index, SandboxAddress(net, slot)).Prefixed("eth0"));
  SP_RETURN_IF_ERROR(DefaultRoute(*in, slot_index, HostEndAddress(net, slot)));
  if (net.rate_bytes > 0) {
    // The sandbox's uploads leave through eth0, its downloads through the host end.
    SP_RETURN_IF_ERROR(LimitRate(*in, slot_index, net.rate_bytes).Prefixed("eth0"));
    SP_RETURN_IF_ERROR(LimitRate(impl_->host, host_index, net.rate_bytes).Prefixed(peer));
  }
  return net.expose ? HandOverToLoopback() : Status::Ok();
}


Status EnterNewNetworkNamespace() {
  if (::unshare(CLONE_NEWNET) != 0) return ErrnoStatus("unshare(CLONE_NEWNET)");
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) return ErrnoStatus("socket");
  struct ifreq ifr = {};
  std::memcpy(ifr.ifr_name, "lo", 3);
  if (::ioctl(s.get(), SIOCGIFFLAGS, &ifr) != 0) return ErrnoStatus("SIOCGIFFLAGS lo");
  ifr.ifr_flags |= IFF_UP;
  if (::ioctl(s.get(), SIOCSIFFLAGS, &ifr) != 0) return ErrnoStatus("SIOCSIFFLAGS lo");
  return Status::Ok();
}

}  // namespace sandpool
