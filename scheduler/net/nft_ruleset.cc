#include "scheduler/net/nft_ruleset.h"

#include <net/if.h>

#include <algorithm>
#include <sstream>

#include "common/egress_rules.h"

namespace sandpool {
namespace {

// Always refused, whatever a policy says (design 3.4): "this" network, private ranges,
// CGNAT, loopback, link-local (cloud metadata at 169.254.169.254), IETF protocol assignments,
// benchmarking, multicast and reserved (broadcast included). Documentation ranges are not here:
// they are not routed on the internet, and the tests use them as their fake internet.
constexpr const char* kNever4[] = {
    "0.0.0.0/8",       "10.0.0.0/8",     "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24",    "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4",
};

std::string Tag(const std::string& prefix, const std::string& consumer) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (char c : prefix + "/" + consumer) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619u;
  }
  static const char kBase32[] = "abcdefghijklmnopqrstuvwxyz234567";
  std::string tag;
  for (int i = 0; i < 3; ++i, h >>= 5) tag += kBase32[h & 31];
  return tag;
}

// "a . b" elements of an `ipv4_addr . inet_service` interval set.
std::string Elements(const std::vector<EgressRule>& rules) {
  std::string out;
  for (const EgressRule& r : rules) {
    std::vector<PortRange> ports = r.ports;
    if (ports.empty()) ports.push_back(PortRange{});
    for (const PortRange& p : ports) {
      if (!out.empty()) out += ", ";
      out += r.cidr.ToString() + " . " + std::to_string(p.lo);
      if (p.hi != p.lo) out += "-" + std::to_string(p.hi);
    }
  }
  return out;
}

// The CIDR rules of a list: the only ones that become set elements (names reach the dyn sets
// through the resolver).
std::vector<EgressRule> CidrRules(const std::vector<EgressRule>& rules) {
  std::vector<EgressRule> out;
  for (const EgressRule& r : rules) {
    if (r.kind == EgressRule::Kind::kCidr) out.push_back(r);
  }
  return out;
}

// "  set NAME { type ipv4_addr; flags interval; auto-merge; elements = { ... } }" (no elements
// clause when empty: nft refuses an empty one).
void AddressSet(std::ostringstream& o, const char* name, const std::vector<Cidr>& ranges) {
  o << "  set " << name << " { type ipv4_addr; flags interval; auto-merge;";
  if (!ranges.empty()) {
    o << " elements = { ";
    for (size_t i = 0; i < ranges.size(); ++i) o << (i ? ", " : "") << ranges[i].ToString();
    o << " }";
  }
  o << " }\n";
}

}  // namespace

std::string CounterName(NetCounter kind, uint32_t template_index) {
  switch (kind) {
    case NetCounter::kHost: return "host_" + std::to_string(template_index);
    case NetCounter::kAlways: return "always_" + std::to_string(template_index);
    case NetCounter::kPolicy: return "policy_" + std::to_string(template_index);
    case NetCounter::kLimit: return "limit_" + std::to_string(template_index);
    case NetCounter::kSpoofed: return "spoofed";
  }
  return "";
}

Result<NetPlan> PlanNetwork(DaemonConfig* config) {
  NetPlan plan;
  std::string tag = Tag(config->prefix, config->consumer);
  plan.table = "sandpool_" + tag;
  plan.if_prefix = "sp" + tag + "-";
  plan.pool = config->net.pool;
  plan.connections = config->net.connections;
  plan.new_connections = config->net.new_connections;
  for (const char* c : kNever4) plan.never.push_back(ParseEgressRule(c)->cidr);
  plan.never.push_back(plan.pool);
  plan.never.insert(plan.never.end(), config->net.refuse.begin(), config->net.refuse.end());
  plan.exempt = config->net.allow_private;
  plan.refuse = config->net.refuse;
  // Slot numbers run up to 2 x (max-sandboxes + templates) (pools.h), two addresses each.
  uint64_t slots = 2ull * (config->max_sandboxes + config->templates.size());
  uint64_t pool_size = 1ull << (32 - plan.pool.len);
  for (uint32_t i = 0; i < config->templates.size(); ++i) {
    TemplateConfig& t = config->templates[i];
    if (!t.network) continue;
    if (2 * slots > pool_size) {
      return Status::Error("--net-pool " + plan.pool.ToString() + " holds " + std::to_string(pool_size / 2) +
                           " slots; this daemon may use " + std::to_string(slots) + " (2 x (max-sandboxes + templates))");
    }
    NetPlan::Template nt{i, t.name, plan.if_prefix + std::to_string(i) + "-", t.egress};
    if (nt.if_prefix.size() + std::to_string(slots - 1).size() >= IFNAMSIZ) {
      return Status::Error("too many templates or slots for interface names (" + nt.if_prefix + std::to_string(slots - 1) + ")");
    }
    t.sandbox.network = SlotNetwork{true, plan.pool.addr, nt.if_prefix, t.expose, t.net_rate.value_or(config->net.rate_bytes)};
    plan.templates.push_back(std::move(nt));
  }
  return plan;
}

bool AlwaysRefused(const NetPlan& plan, uint32_t addr) {
  auto in = [addr](const std::vector<Cidr>& list) {
    return std::any_of(list.begin(), list.end(), [addr](const Cidr& c) { return c.Contains(Cidr{addr, 32}); });
  };
  // The pool and the operator's own refusals whatever is exempted: sandbox to sandbox is never
  // egress, and --net-refuse says "never" in so many words.
  return plan.pool.Contains(Cidr{addr, 32}) || in(plan.refuse) || (in(plan.never) && !in(plan.exempt));
}

std::string DynSet(uint32_t template_index) { return "dyn_" + std::to_string(template_index); }
std::string SlotDynSet(uint32_t slot) { return "jdyn_" + std::to_string(slot); }

std::string NftNarrowSlot(const NetPlan& plan, uint32_t template_index, uint32_t slot, const std::string& ifname,
                          const EgressPolicy& policy) {
  const std::string t = "inet " + plan.table + " ", n = std::to_string(slot), tn = std::to_string(template_index);
  const std::vector<EgressRule> allow = CidrRules(policy.allow), deny = CidrRules(policy.deny);
  const std::string refuse = " counter name " + CounterName(NetCounter::kPolicy, template_index) + " goto refuse\n";
  std::ostringstream o;
  o << "add chain " << t << "j_" << n << "\n"
    << "flush chain " << t << "j_" << n << "\n";
  for (const char* set : {"jallow_", "jdeny_"}) {
    o << "add set " << t << set << n << " { type ipv4_addr . inet_service; flags interval; }\n"
      << "flush set " << t << set << n << "\n";
  }
  o << "add set " << t << SlotDynSet(slot) << " { type ipv4_addr . inet_service; flags interval; }\n"
    << "flush set " << t << SlotDynSet(slot) << "\n";
  if (!allow.empty()) o << "add element " << t << "jallow_" << n << " { " << Elements(allow) << " }\n";
  if (!deny.empty()) o << "add element " << t << "jdeny_" << n << " { " << Elements(deny) << " }\n";
  o << "add rule " << t << "j_" << n << " ip daddr . th dport @jdeny_" << n << refuse
    << "add rule " << t << "j_" << n << " ip daddr . th dport @jallow_" << n << " goto limit_" << tn << "\n"
    << "add rule " << t << "j_" << n << " ip daddr . th dport @" << SlotDynSet(slot) << " goto limit_" << tn << "\n"
    << "add rule " << t << "j_" << n << refuse
    << "add element " << t << "narrowed { \"" << ifname << "\" : goto j_" << n << " }\n";
  return o.str();
}

std::string NftResetSlot(const NetPlan& plan, uint32_t slot, const std::string& ifname) {
  // REQUIRES: the slot is narrowed (nft 1.0.6 has no delete that tolerates a missing element,
  // and re-adding an element of a map with another verdict is an error, not a replacement).
  const std::string t = "inet " + plan.table + " ";
  return "delete element " + t + "narrowed { \"" + ifname + "\" }\nflush set " + t + SlotDynSet(slot) + "\n";
}

std::string NftChangeAddresses(const NetPlan& plan, const std::vector<DynChange>& changes) {
  std::string deleted, added;
  for (const DynChange& c : changes) {
    std::string addr = Cidr{c.addr, 32}.ToString();
    addr.resize(addr.size() - 3);  // no "/32": a plain address
    auto elements = [&](const std::vector<PortRange>& ranges) {
      std::string out;
      for (const PortRange& p : ranges) {
        out += (out.empty() ? "" : ", ") + addr + " . " + std::to_string(p.lo) + (p.hi != p.lo ? "-" + std::to_string(p.hi) : "");
      }
      return out;
    };
    std::string set = "inet " + plan.table + " " + c.set;
    // Deletes first: the new elements may overlap the old ones, which an interval set refuses.
    if (!c.before.empty()) deleted += "delete element " + set + " { " + elements(c.before) + " }\n";
    if (!c.after.empty()) added += "add element " + set + " { " + elements(c.after) + " }\n";
  }
  return deleted + added;
}

std::string NftMapHostPort(const NetPlan& plan, uint16_t host_port, uint32_t addr, uint16_t port) {
  std::string a = Cidr{addr, 32}.ToString();
  a.resize(a.size() - 3);
  return "add element inet " + plan.table + " hostport4 { " + std::to_string(host_port) + " : " + a + " . " +
         std::to_string(port) + " }\n";
}

std::string NftUnmapHostPort(const NetPlan& plan, uint16_t host_port) {
  return "delete element inet " + plan.table + " hostport4 { " + std::to_string(host_port) + " }\n";
}

std::string NftDeleteTable(const NetPlan& plan) {
  // Declaring the table first makes the delete succeed whether or not it exists.
  return "table inet " + plan.table + "\ndelete table inet " + plan.table + "\n";
}

std::string NftRuleset(const NetPlan& plan) {
  const std::string any = "\"" + plan.if_prefix + "*\"";
  const char* refuse = "goto refuse";
  std::ostringstream o;
  o << NftDeleteTable(plan);
  o << "table inet " << plan.table << " {\n";
  // Owned by the daemon's netlink socket: nobody else (a `flush ruleset`, an nftables.service
  // reload) can remove or change it while the daemon lives, and it goes when the daemon does.
  o << "  flags owner;\n";
  AddressSet(o, "never4", plan.never);
  AddressSet(o, "refuse4", plan.refuse);
  AddressSet(o, "exempt4", plan.exempt);
  o << "  set conns4 { type ipv4_addr; size 65536; flags dynamic; }\n";
  o << "  set rate4 { type ipv4_addr; size 65536; flags dynamic,timeout; timeout 60s; }\n";
  o << "  set dnsrate4 { type ipv4_addr; size 65536; flags dynamic,timeout; timeout 60s; }\n";
  o << "  map narrowed { type ifname : verdict; }\n";
  o << "  map hostport4 { type inet_service : ipv4_addr . inet_service; }\n";
  o << "  counter " << CounterName(NetCounter::kSpoofed, 0) << " { }\n";
  for (const NetPlan::Template& t : plan.templates) {
    for (NetCounter k : {NetCounter::kHost, NetCounter::kAlways, NetCounter::kPolicy, NetCounter::kLimit}) {
      o << "  counter " << CounterName(k, t.index) << " { }\n";
    }
    const std::vector<EgressRule> cidrs = CidrRules(t.egress.allow), deny_cidrs = CidrRules(t.egress.deny);
    o << "  set allow_" << t.index << " { type ipv4_addr . inet_service; flags interval;";
    if (!cidrs.empty()) o << " elements = { " << Elements(cidrs) << " }";
    o << " }\n";
    o << "  set dyn_" << t.index << " { type ipv4_addr . inet_service; flags interval; }\n";
    if (!deny_cidrs.empty()) {
      o << "  set deny_" << t.index << " { type ipv4_addr . inet_service; flags interval; elements = { "
        << Elements(deny_cidrs) << " } }\n";
    }
  }
  // TCP gets a reset (connect() fails at once with ECONNREFUSED); the rest ICMP admin-prohibited.
  // Not ICMP for TCP: the kernel rate-limits ICMP errors per destination (icmp_ratelimit), so a
  // burst of refused connects would wait for SYN retransmits, a second each.
  o << "  chain refuse {\n    meta l4proto tcp reject with tcp reset\n    reject with icmpx admin-prohibited\n  }\n";
  // DNS from a slot, to whatever address, goes to its template's resolver (a redirect: to the
  // host end's address, on the resolver's port).
  o << "  chain prerouting { type nat hook prerouting priority dstnat; policy accept;\n";
  for (const NetPlan::Template& t : plan.templates) {
    if (t.dns_port == 0) continue;
    for (const char* proto : {"udp", "tcp"}) {
      o << "    iifname \"" << t.if_prefix << "*\" meta nfproto ipv4 " << proto << " dport 53 redirect to :" << t.dns_port
        << "\n";
    }
  }
  // Exposed ports' host ports: from anywhere but a slot (slots cannot reach the host's
  // addresses, and a DNAT into the pool would be refused as sandbox to sandbox anyway).
  if (plan.host_port_lo) o << "    iifname != " << any << " fib daddr type local dnat ip to tcp dport map @hostport4\n";
  o << "  }\n";
  if (plan.host_port_lo) {
    // ... and from the host's own processes, on its non-loopback addresses.
    o << "  chain nat_output { type nat hook output priority -100; policy accept;\n"
      << "    fib daddr type local dnat ip to tcp dport map @hostport4\n  }\n";
  }
  // A packet from a slot that would be forwarded with its TTL run out is dropped before the
  // routing code answers it with ICMP time-exceeded from the host's address (a traceroute from
  // a sandbox learns nothing of the host). After the redirect (dstnat), so that DNS to the
  // resolver, which is delivered, not forwarded, is not affected.
  o << "  chain ttl { type filter hook prerouting priority -90; policy accept;\n"
    << "    iifname " << any << " ip ttl <= 1 fib daddr type != local drop\n  }\n";
  // To the host itself: only a slot's own template's resolver, reached through that redirect.
  // The resolvers' ports take nothing from anywhere else.
  std::string dns_ports;
  for (const NetPlan::Template& t : plan.templates) {
    if (t.dns_port) dns_ports += (dns_ports.empty() ? "" : ", ") + std::to_string(t.dns_port);
  }
  o << "  chain input { type filter hook input priority filter; policy accept;\n"
    << "    iifname " << any << " jump slot_to_host\n";
  if (!dns_ports.empty()) o << "    meta l4proto { udp, tcp } th dport { " << dns_ports << " } drop\n";
  o << "  }\n";
  // Replies to what the host opened into the slot (the preview proxy's connections) pass;
  // nothing a slot opens toward the host does, but DNS through the redirect.
  o << "  chain slot_to_host {\n    ct state established,related accept\n";
  for (const NetPlan::Template& t : plan.templates) {
    if (t.dns_port == 0) continue;
    // A flood of questions is cut here, before it costs the daemon's loop anything.
    o << "    iifname \"" << t.if_prefix << "*\" meta l4proto { udp, tcp } th dport " << t.dns_port
      << " update @dnsrate4 { ip saddr limit rate over 200/second burst 400 packets } drop\n";
    o << "    iifname \"" << t.if_prefix << "*\" meta l4proto { udp, tcp } th dport " << t.dns_port
      << " ct status dnat accept\n";
  }
  for (const NetPlan::Template& t : plan.templates) {
    o << "    iifname \"" << t.if_prefix << "*\" counter name " << CounterName(NetCounter::kHost, t.index) << " "
      << refuse << "\n";
  }
  o << "    " << refuse << "\n  }\n";
  o << "  chain forward { type filter hook forward priority filter; policy accept;\n"
    << "    iifname " << any << " jump from_slot\n"
    << "    oifname " << any << " jump to_slot\n  }\n";
  o << "  chain from_slot {\n"
    << "    meta nfproto ipv6 counter name spoofed drop\n"
    << "    fib saddr . iif oif missing counter name spoofed drop\n"
    << "    ct state established,related accept\n"
    << "    ct state invalid drop\n";
  for (const NetPlan::Template& t : plan.templates) o << "    iifname \"" << t.if_prefix << "*\" goto t_" << t.index << "\n";
  o << "    " << refuse << "\n  }\n";
  // Into a slot only what answers its own connections.
  o << "  chain to_slot {\n    ct state established,related accept\n";
  if (plan.host_port_lo) o << "    ct status dnat meta l4proto tcp accept\n";  // a host port's connection
  o << "    drop\n  }\n";
  // From the host itself into a slot: answers (DNS replies, refusals), and the preview proxy.
  o << "  chain output { type filter hook output priority filter; policy accept;\n"
    << "    oifname " << any << " jump host_to_slot\n";
  // The preview proxy (it parses whatever the internet sends) opens connections into slots and
  // nowhere else: not Redis on the host's loopback, not the internet.
  if (plan.preview_uid != 0) {
    o << "    meta skuid " << plan.preview_uid << " ct state new " << refuse << "\n";
  }
  o << "  }\n";
  o << "  chain host_to_slot {\n    ct state established,related,untracked accept\n";
  if (plan.preview_uid != 0) o << "    meta skuid " << plan.preview_uid << " meta l4proto tcp ct state new accept\n";
  if (plan.host_port_lo) o << "    ct status dnat meta l4proto tcp accept\n";
  o << "    " << refuse << "\n  }\n";
  for (const NetPlan::Template& t : plan.templates) {
    const std::string n = std::to_string(t.index);
    const std::string policy = "counter name " + CounterName(NetCounter::kPolicy, t.index) + " " + refuse;
    const std::string always = "counter name " + CounterName(NetCounter::kAlways, t.index) + " " + refuse;
    const std::string limit = "counter name " + CounterName(NetCounter::kLimit, t.index);
    o << "  chain t_" << n << " {\n"
      << "    ip daddr " << plan.pool.ToString() << " " << always << "\n"  // other sandboxes, whatever is exempt
      << "    ip daddr @refuse4 " << always << "\n"
      << "    ip daddr @never4 ip daddr != @exempt4 " << always << "\n"
      << "    meta l4proto != { tcp, udp } " << policy << "\n"
      << "    meta l4proto { tcp, udp } th dport { 53, 853 } " << always << "\n"  // 53: only without a resolver
      << "    iifname vmap @narrowed\n";
    if (!CidrRules(t.egress.deny).empty()) o << "    ip daddr . th dport @deny_" << n << " " << policy << "\n";
    o << "    ip daddr . th dport @allow_" << n << " goto limit_" << n << "\n"
      << "    ip daddr . th dport @dyn_" << n << " goto limit_" << n << "\n"
      << "    " << policy << "\n  }\n";
    o << "  chain limit_" << n << " {\n"
      << "    add @conns4 { ip saddr ct count over " << plan.connections << " } " << limit << " " << refuse << "\n"
      << "    update @rate4 { ip saddr limit rate over " << plan.new_connections << "/second burst "
      << 2 * plan.new_connections << " packets } " << limit << " drop\n"
      << "    accept\n  }\n";
  }
  o << "  chain postrouting { type nat hook postrouting priority srcnat; policy accept;\n"
    << "    ip saddr " << plan.pool.ToString() << " oifname != " << any << " masquerade\n  }\n";
  o << "}\n";
  return o.str();
}

}  // namespace sandpool
