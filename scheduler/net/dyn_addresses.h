// The addresses the resolver opened (docs/design/network.md 4.3), as the daemon keeps them: for
// each dyn set and address, the grants that opened it (the ports of the rules that allowed the
// name and whose address filter holds the address, until the answer's clamped TTL), and what the
// kernel's set holds for it now. Pure code: nft_ruleset.h turns its changes into one
// transaction, net_firewall.h runs it.
//
// Why the daemon, not the kernel, expires elements: a dyn set is an interval set of
// `address . port range`, and an interval set refuses an element that overlaps another (one
// name's 198.51.100.7 . 443 and another's 198.51.100.7 . 1-65535). So every address's elements
// are always the union of its live grants, merged into disjoint ranges, and a change replaces
// the old ones (delete, then add, in one transaction). That needs the set to hold exactly what
// this object believes; with kernel timeouts an element could vanish a moment before a delete
// of it, failing the whole transaction. So elements have no timeout: Expire() (once a second,
// on the daemon's loop) takes out what outlived its grants.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/egress_rules.h"

namespace sandpool {

// What the kernel's set must change for one address: its elements `before` go, `after` come
// (disjoint, sorted port ranges; empty: none; every port is {1, 65535}).
struct DynChange {
  std::string set;
  uint32_t addr = 0;
  std::vector<PortRange> before, after;
  bool operator==(const DynChange&) const = default;
};

class DynAddresses {
 public:
  // Changes that would open `addr` in `set` on `ports` (canonical: empty means every port) too.
  // Nothing is changed here: Apply does, once the kernel took them. No change (an empty
  // result) when the address is open on those ports already, for however long: the set's
  // elements have no expiry of their own.
  std::vector<DynChange> Grant(const std::string& set, uint32_t addr, const std::vector<PortRange>& ports) const;
  // Records a grant once `changes` (what Grant returned for it) are applied.
  void Apply(const std::string& set, uint32_t addr, const std::vector<PortRange>& ports, int64_t until_us,
             const std::vector<DynChange>& changes);
  // Changes that take out what no grant holds at `now_us` any more; CommitExpired with the same
  // `now_us` once they are applied.
  std::vector<DynChange> Expired(int64_t now_us) const;
  void CommitExpired(int64_t now_us, const std::vector<DynChange>& changes);
  size_t size() const { return addresses_.size(); }
  // A set that was flushed (a narrowed slot's, at narrowing and reset): nothing of it is known.
  void Forget(const std::string& set);

  // `ports` (canonical, empty: all) as explicit ranges.
  static std::vector<PortRange> Explicit(const std::vector<PortRange>& ports);

 private:
  struct Address {
    std::vector<std::pair<std::vector<PortRange>, int64_t>> grants;  // explicit ranges, until
    std::vector<PortRange> held;                                     // what the set holds
  };
  static std::vector<PortRange> Union(const Address& a, int64_t now_us);
  std::map<std::pair<std::string, uint32_t>, Address> addresses_;
};

}  // namespace sandpool
