#include "scheduler/net/dyn_addresses.h"

#include <algorithm>

namespace sandpool {
namespace {

// Sorted, overlapping and adjacent ranges merged; every port stays {1, 65535} (CanonicalPorts
// would write it as none).
std::vector<PortRange> Merge(std::vector<PortRange> ranges) {
  std::sort(ranges.begin(), ranges.end(), [](const PortRange& a, const PortRange& b) { return a.lo < b.lo; });
  std::vector<PortRange> out;
  for (const PortRange& p : ranges) {
    if (!out.empty() && uint32_t{p.lo} <= uint32_t{out.back().hi} + 1) out.back().hi = std::max(out.back().hi, p.hi);
    else out.push_back(p);
  }
  return out;
}

}  // namespace

std::vector<PortRange> DynAddresses::Explicit(const std::vector<PortRange>& ports) {
  if (ports.empty()) return {PortRange{1, 65535}};
  return Merge(ports);
}

std::vector<PortRange> DynAddresses::Union(const Address& a, int64_t now_us) {
  std::vector<PortRange> all;
  for (const auto& [ranges, until] : a.grants) {
    if (until > now_us) all.insert(all.end(), ranges.begin(), ranges.end());
  }
  return Merge(std::move(all));
}

std::vector<DynChange> DynAddresses::Grant(const std::string& set, uint32_t addr,
                                           const std::vector<PortRange>& ports) const {
  std::vector<PortRange> wanted = Explicit(ports);
  auto it = addresses_.find({set, addr});
  std::vector<PortRange> held = it == addresses_.end() ? std::vector<PortRange>{} : it->second.held;
  std::vector<PortRange> after = held;
  after.insert(after.end(), wanted.begin(), wanted.end());
  after = Merge(std::move(after));
  if (after == held) return {};
  return {DynChange{set, addr, held, after}};
}

void DynAddresses::Apply(const std::string& set, uint32_t addr, const std::vector<PortRange>& ports, int64_t until_us,
                         const std::vector<DynChange>& changes) {
  Address& a = addresses_[{set, addr}];
  std::vector<PortRange> wanted = Explicit(ports);
  bool merged = false;
  for (auto& [ranges, until] : a.grants) {
    if (ranges == wanted) {
      until = std::max(until, until_us);
      merged = true;
    }
  }
  if (!merged) a.grants.emplace_back(std::move(wanted), until_us);
  for (const DynChange& c : changes) {
    if (c.set == set && c.addr == addr) a.held = c.after;
  }
}

std::vector<DynChange> DynAddresses::Expired(int64_t now_us) const {
  std::vector<DynChange> out;
  for (const auto& [key, a] : addresses_) {
    std::vector<PortRange> live = Union(a, now_us);
    if (live != a.held) out.push_back(DynChange{key.first, key.second, a.held, std::move(live)});
  }
  return out;
}

void DynAddresses::CommitExpired(int64_t now_us, const std::vector<DynChange>& changes) {
  for (const DynChange& c : changes) {
    auto it = addresses_.find({c.set, c.addr});
    if (it != addresses_.end()) it->second.held = c.after;
  }
  for (auto it = addresses_.begin(); it != addresses_.end();) {
    std::erase_if(it->second.grants, [now_us](const auto& g) { return g.second <= now_us; });
    if (it->second.grants.empty() && it->second.held.empty()) it = addresses_.erase(it);
    else ++it;
  }
}

void DynAddresses::Forget(const std::string& set) {
  std::erase_if(addresses_, [&](const auto& kv) { return kv.first.first == set; });
}

}  // namespace sandpool
