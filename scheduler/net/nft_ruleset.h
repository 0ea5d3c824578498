// The daemon's nftables table for network templates, as text (docs/design/network.md section 3):
// pure code, no kernel. scheduler/net/net_firewall.h loads it; tests check it with `nft -c`.
//
// One table `inet sandpool_<tag>` in the host namespace. Every slot's host end is named
// `sp<tag>-<template>-<slot>` (worker/sandbox/netns_setup.h), so the rules match templates by name
// prefix and the table never changes while the daemon runs: nothing is done per slot or per
// job, and a job of a network template starts exactly like any other.
//
// What a sandbox of template t gets, in order (the first match decides):
//   - to any address of the host itself (Redis, metrics, anything listening): refused
//     (`input`; counter host_t);
//   - IPv6, or a source address that is not its own: dropped (counter spoofed); a packet that
//     would be forwarded with TTL 1 or less: dropped (no ICMP time-exceeded from the host);
//   - replies of connections it opened: accepted;
//   - always-refused destinations (private, loopback, link-local and cloud metadata, CGNAT,
//     multicast, reserved, and the slot pool itself, so other sandboxes): refused (always_t);
//   - DNS (port 53, UDP and TCP) to any address: redirected to the daemon's resolver for the
//     template (scheduler/net/dns_proxy.h), on a port of its own per template; the only thing on the
//     host a sandbox may reach, and only this way (nothing else reaches those ports);
//   - anything but TCP and UDP, and DNS-over-TLS to anyone (port 853): refused;
//   - a slot whose job or session narrowed the policy: its own chain instead of the rest
//     (NftNarrowSlot);
//   - the template's deny list, then its allow list (address range . port range), then the
//     addresses its resolver answered for allowed names (set dyn_t, each address on the ports
//     of the rules that allowed it, for the answer's TTL: dyn_addresses.h); no match: refused
//     (policy_t);
//   - from the host into a slot: replies, and new TCP connections of the preview proxy's uid
//     (preview_proxy.h) only; nothing else on the host can reach a sandbox's servers, but
//     through an exposed port's host port (hostport4: DNAT from anything but a slot);
//   - past the per-sandbox limits (concurrent connections, new connections per second):
//     refused or dropped (limit_t); otherwise accepted and masqueraded behind the host.
// A refused TCP connection gets a reset, so connect() fails at once (ECONNREFUSED) instead of
// hanging until its timeout; other refused packets get ICMP admin-prohibited.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/config/config.h"
#include "scheduler/net/dyn_addresses.h"

namespace sandpool {

struct NetPlan {
  std::string table;      // "sandpool_<tag>"
  std::string if_prefix;  // "sp<tag>-": every slot's host end
  Cidr pool;
  uint32_t connections = 0, new_connections = 0;
  struct Template {
    uint32_t index = 0;
    std::string name;
    std::string if_prefix;  // "sp<tag>-<index>-"
    EgressPolicy egress;
    uint16_t dns_port = 0;  // the template's resolver (set once its sockets are bound)
  };
  std::vector<Template> templates;  // network templates only
  std::vector<Cidr> never;          // always refused: fixed ranges and the pool itself
  std::vector<Cidr> exempt;         // ... but these (the operator's --net-allow-private)
  std::vector<Cidr> refuse;         // the operator's own always-refused ranges (--net-refuse), never exempt
  uint32_t preview_uid = 0;         // the preview proxy's host uid: may open connections into slots (0: none)
  uint16_t host_port_lo = 0, host_port_hi = 0;  // exposed ports' host ports (0: none)
  bool empty() const { return templates.empty(); }
};

// The plan for `config`'s network templates; also fills each one's sandbox.network (what its
// keepers make). `tag` is 3 characters of a hash of the daemon's prefix and consumer name, so
// two daemons on one host (each with its own --net-pool) never share names. Errors: a pool too
// small for every slot number the daemon may use, or names that would not fit an interface.
Result<NetPlan> PlanNetwork(DaemonConfig* config);

// The whole table, replacing any earlier one of the same name in one transaction.
std::string NftRuleset(const NetPlan& plan);
// Removes the table (no error if it is gone).
std::string NftDeleteTable(const NetPlan& plan);

// Whether `addr` (host byte order) is in plan.never and not plan.exempt: no policy can allow it.
bool AlwaysRefused(const NetPlan& plan, uint32_t addr);

// The elements of dyn sets that change (dyn_addresses.h: each address's old elements deleted,
// its new ones added), as one transaction.
std::string NftChangeAddresses(const NetPlan& plan, const std::vector<DynChange>& changes);
// The dyn set of template `t` ("dyn_<t>"), and of a narrowed slot ("jdyn_<slot>").
std::string DynSet(uint32_t template_index);
std::string SlotDynSet(uint32_t slot);

// A job or session that narrows its template's policy (egress_policy.h) gets its slot narrowed
// while it runs: the slot's own chain j_<slot> (its deny, its CIDRs, its own dyn set; never the
// template's sets) in place of the template's, through the `narrowed` verdict map keyed by the
// slot's host end `ifname`. One transaction; ResetSlot undoes it (REQUIRES: narrowed; the chain
// and sets stay, for the slot's next narrowing, which flushes them).
std::string NftNarrowSlot(const NetPlan& plan, uint32_t template_index, uint32_t slot, const std::string& ifname,
                          const EgressPolicy& policy);
std::string NftResetSlot(const NetPlan& plan, uint32_t slot, const std::string& ifname);

// An exposed port's host port (hostport4 map: DNAT of TCP to that host port, on any of the
// host's addresses, from anywhere but a slot, to `addr`:`port`), and its end.
std::string NftMapHostPort(const NetPlan& plan, uint16_t host_port, uint32_t addr, uint16_t port);
std::string NftUnmapHostPort(const NetPlan& plan, uint16_t host_port);

// The named counters of the table and what they count. `template_index` is -1 for `spoofed`.
enum class NetCounter { kHost, kAlways, kPolicy, kLimit, kSpoofed };
std::string CounterName(NetCounter kind, uint32_t template_index);

}  // namespace sandpool
