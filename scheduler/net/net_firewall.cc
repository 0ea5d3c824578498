#include "scheduler/net/net_firewall.h"

#include <fcntl.h>
#include <nftables/libnftables.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "common/clock.h"
#include "common/fd.h"
#include "common/log.h"

namespace sandpool {
namespace {

constexpr const char* kIpForward = "/proc/sys/net/ipv4/ip_forward";

Status EnsureForwarding(bool set) {
  char c = 0;
  {
    UniqueFd f(::open(kIpForward, O_RDONLY | O_CLOEXEC));
    if (!f || ::read(f.get(), &c, 1) != 1) return ErrnoStatus(kIpForward);
  }
  if (c == '1') return Status::Ok();
  if (!set) {
    return Status::Error("network templates need IPv4 forwarding, and net.ipv4.ip_forward is 0: turn it on "
                         "(sysctl -w net.ipv4.ip_forward=1) or start with --net-ip-forward=set");
  }
  UniqueFd f(::open(kIpForward, O_WRONLY | O_CLOEXEC));
  if (!f || ::write(f.get(), "1", 1) != 1) return ErrnoStatus(kIpForward);
  LogWarn("turned on IPv4 forwarding (--net-ip-forward=set); the table forwards only the sandboxes' traffic", {});
  return Status::Ok();
}

}  // namespace

NetFirewall::NetFirewall(const NetPlan& plan) : plan_(plan) {}

NetFirewall::~NetFirewall() {
  if (nft_ == nullptr) return;
  auto r = Run(NftDeleteTable(plan_));
  if (!r.ok()) LogWarn("nftables table not removed", {{"table", plan_.table}, {"error", r.status().message()}});
  nft_ctx_free(nft_);
}

Result<std::unique_ptr<NetFirewall>> NetFirewall::Install(const NetPlan& plan, bool set_ip_forward) {
  SP_RETURN_IF_ERROR(EnsureForwarding(set_ip_forward));
  std::unique_ptr<NetFirewall> fw(new NetFirewall(plan));
  fw->nft_ = nft_ctx_new(NFT_CTX_DEFAULT);
  if (fw->nft_ == nullptr) return Status::Error("nft_ctx_new failed");
  nft_ctx_buffer_output(fw->nft_);
  nft_ctx_buffer_error(fw->nft_);
  auto r = fw->Run(NftRuleset(plan));
  if (!r.ok()) return r.status().Prefixed("loading nftables table " + plan.table);
  return fw;
}

Result<std::string> NetFirewall::Run(const std::string& commands) {
  int rc = nft_run_cmd_from_buffer(nft_, commands.c_str());
  const char* out = nft_ctx_get_output_buffer(nft_);
  const char* err = nft_ctx_get_error_buffer(nft_);
  if (rc != 0) return Status::Error(err && *err ? std::string(err) : "nft command failed");
  return std::string(out ? out : "");
}

Result<std::map<std::string, uint64_t>> NetFirewall::ReadCounters() {
  auto text = Run("list counters table inet " + plan_.table + "\n");
  if (!text.ok()) return text.status();
  // "counter NAME {\n packets N bytes M\n }" for each named counter.
  std::map<std::string, uint64_t> out;
  std::istringstream in(*text);
  std::string word, name;
  while (in >> word) {
    if (word == "counter") {
      in >> name;
    } else if (word == "packets" && !name.empty()) {
      uint64_t n = 0;
      if (in >> n) out[name] = n;
      name.clear();
    }
  }
  return out;
}

Status NetFirewall::NarrowSlot(uint32_t template_index, uint32_t slot, const std::string& ifname,
                               const EgressPolicy& policy) {
  dyn_.Forget(SlotDynSet(slot));
  auto r = Run(NftNarrowSlot(plan_, template_index, slot, ifname, policy));
  return r.ok() ? Status::Ok() : r.status().Prefixed("narrowing slot " + std::to_string(slot));
}

Status NetFirewall::ResetSlot(uint32_t slot, const std::string& ifname) {
  dyn_.Forget(SlotDynSet(slot));
  auto r = Run(NftResetSlot(plan_, slot, ifname));
  return r.ok() ? Status::Ok() : r.status().Prefixed("resetting slot " + std::to_string(slot));
}

Status NetFirewall::MapHostPort(uint16_t host_port, uint32_t addr, uint16_t port) {
  auto r = Run(NftMapHostPort(plan_, host_port, addr, port));
  return r.ok() ? Status::Ok() : r.status().Prefixed("host port " + std::to_string(host_port));
}

Status NetFirewall::UnmapHostPort(uint16_t host_port) {
  auto r = Run(NftUnmapHostPort(plan_, host_port));
  return r.ok() ? Status::Ok() : r.status().Prefixed("host port " + std::to_string(host_port));
}

Status NetFirewall::OpenAddresses(const std::string& set, const std::vector<AddressGrant>& grants) {
  int64_t now = MonotonicUs();
  std::vector<DynChange> changes;
  std::set<uint32_t> seen;  // an address twice in one answer: once (its ports are the same)
  for (const AddressGrant& g : grants) {
    if (!seen.insert(g.addr).second) continue;
    std::vector<DynChange> c = dyn_.Grant(set, g.addr, g.ports);
    changes.insert(changes.end(), c.begin(), c.end());
  }
  if (!changes.empty()) {
    auto r = Run(NftChangeAddresses(plan_, changes));
    if (!r.ok()) return r.status();
  }
  // Only now: what the kernel has is what we remember.
  for (const AddressGrant& g : grants) dyn_.Apply(set, g.addr, g.ports, now + int64_t{g.timeout_s} * 1000000, changes);
  return Status::Ok();
}

Status NetFirewall::ExpireAddresses() {
  int64_t now = MonotonicUs();
  std::vector<DynChange> changes = dyn_.Expired(now);
  if (!changes.empty()) {
    auto r = Run(NftChangeAddresses(plan_, changes));
    if (!r.ok()) return r.status().Prefixed("closing expired addresses");
  }
  dyn_.CommitExpired(now, changes);
  return Status::Ok();
}

void NetFirewall::ExportCounters(Metrics* metrics) {
  auto counters = ReadCounters();
  if (!counters.ok()) {
    LogWarn("cannot read the network counters", {{"error", counters.status().message()}});
    return;
  }
  auto delta = [&](const std::string& name) -> uint64_t {
    auto it = counters->find(name);
    if (it == counters->end()) return 0;
    uint64_t& seen = exported_[name];
    uint64_t d = it->second >= seen ? it->second - seen : it->second;  // reset by someone: count anew
    seen = it->second;
    return d;
  };
  static constexpr std::pair<NetCounter, const char*> kReasons[] = {
      {NetCounter::kHost, "host"}, {NetCounter::kAlways, "always"}, {NetCounter::kPolicy, "policy"}, {NetCounter::kLimit, "limit"}};
  for (const NetPlan::Template& t : plan_.templates) {
    for (const auto& [kind, reason] : kReasons) {
      if (uint64_t d = delta(CounterName(kind, t.index))) metrics->NetRefused(t.name, reason, d);
    }
  }
  if (uint64_t d = delta(CounterName(NetCounter::kSpoofed, 0))) metrics->NetSpoofed(d);
}

}  // namespace sandpool
