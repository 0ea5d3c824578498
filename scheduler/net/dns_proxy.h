// The resolver sandboxes of network templates use (docs/design/network.md section 4): the only
// way a sandbox learns an address by name, and the way names in a template's `egress` become
// open addresses.
//
// Every DNS packet a network sandbox sends (UDP or TCP port 53, to any address) is redirected by
// the daemon's table to its template's resolver: one UDP and one TCP socket per network
// template, on a port the kernel picked, in the daemon's loop. A question is answered:
//   - a name the template denies, or allows no rule for: NXDOMAIN, at once, never forwarded
//     (programs fail fast with "not found" rather than retrying a temporary failure);
//   - an allowed name, type A: resolved upstream (libunbound in the daemon's event loop, forward
//     only, to --net-dns-upstream or the host's resolv.conf); the answer is filtered
//     (dns_answer.h: CNAME chain from the name asked, A records only; private, host and pool
//     addresses dropped, and if that leaves nothing, REFUSED: rebinding); each address left is
//     opened in the template's dyn set for its (clamped) TTL, on the rule's ports, and only
//     once that transaction returned is the reply sent, so a connect never races its opening;
//   - an allowed name, AAAA / HTTPS / SVCB: no records (sandboxes have no IPv6), other types:
//     REFUSED. Only A questions ever leave the host.
//   - more than --net-dns-qps per second from one sandbox (bursts of twice that): REFUSED.
// Counted by template and result (sandpool_net_dns_queries_total).
//
// Ownership: main() binds (before the table is loaded, which needs the ports, and before the
// spawner is forked, which closes every fd it inherits); the Daemon starts it on its loop.
#pragma once

#include <event2/event.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "metrics/metrics.h"
#include "scheduler/net/nft_ruleset.h"

namespace sandpool {

class NetFirewall;

struct DnsOptions {
  std::string upstream;  // "a.b.c.d[@port]" ...: space-separated; empty: the host's resolv.conf
  uint32_t ttl_min = 300, ttl_max = 3600;
  uint32_t qps = 50;
};

class DnsProxy {
 public:
  // Binds the sockets of every template in `plan` and sets each one's dns_port.
  static Result<std::unique_ptr<DnsProxy>> Bind(NetPlan* plan, const DnsOptions& options);
  DnsProxy(const DnsProxy&) = delete;
  DnsProxy& operator=(const DnsProxy&) = delete;
  ~DnsProxy();

  // Serves on `base` from now on. `firewall` and `metrics` outlive this object.
  Status Start(struct event_base* base, NetFirewall* firewall, Metrics* metrics);

  // A narrowed slot (its job's or session's policy, nft_ruleset.h NftNarrowSlot), by its
  // sandbox's address: its names are judged by `policy` and their addresses opened in the slot's
  // own dyn set. nullptr: back to its template's.
  void SetSlotPolicy(uint32_t sandbox_addr, uint32_t slot, const EgressPolicy* policy);

  struct Impl;

 private:
  explicit DnsProxy(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sandpool
