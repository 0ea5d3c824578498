// The daemon's nftables table (scheduler/net/nft_ruleset.h) in the host's network namespace:
// loaded with libnftables before the first keeper of a network template exists, removed when
// the daemon stops. A daemon that crashed leaves its table behind, which only refuses (its
// slots' links died with their keepers); the next start replaces it in one transaction.
//
// Runs on the daemon's thread; each call is one netlink round trip through libnftables (which
// reads the kernel's ruleset first), so it is kept off the job path: once at start-up, and the
// counters once per heartbeat.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "metrics/metrics.h"
#include "scheduler/net/nft_ruleset.h"

struct nft_ctx;

namespace sandpool {

class NetFirewall {
 public:
  // REQUIRES root in the initial user namespace. IPv4 forwarding must be on (routed egress
  // needs it): with `set_ip_forward` it is turned on, else its being off is an error saying so.
  static Result<std::unique_ptr<NetFirewall>> Install(const NetPlan& plan, bool set_ip_forward);
  NetFirewall(const NetFirewall&) = delete;
  NetFirewall& operator=(const NetFirewall&) = delete;
  ~NetFirewall();  // removes the table

  // Packets counted so far by the table's named counters (nft_ruleset.h CounterName).
  Result<std::map<std::string, uint64_t>> ReadCounters();

  // Opens each address of `grants` (a DNS answer) in dyn set `set` (DynSet, SlotDynSet) on its
  // ports (empty: all) for its timeout, besides whatever else it is open on (other names'
  // grants: dyn_addresses.h). One transaction, none if nothing changes: when it returns,
  // connects to them pass.
  struct AddressGrant {
    uint32_t addr = 0;
    uint32_t timeout_s = 0;
    std::vector<PortRange> ports;  // canonical; empty: every port
  };
  Status OpenAddresses(const std::string& set, const std::vector<AddressGrant>& grants);
  // Closes what outlived its grants (one transaction, none if nothing did). Once a second, on
  // the daemon's loop (dns_proxy.h).
  Status ExpireAddresses();
  // nft_ruleset.h NftNarrowSlot / NftResetSlot. Not on any path but a narrowing job's or
  // session's start and end.
  Status NarrowSlot(uint32_t template_index, uint32_t slot, const std::string& ifname, const EgressPolicy& policy);
  Status ResetSlot(uint32_t slot, const std::string& ifname);
  // nft_ruleset.h NftMapHostPort / NftUnmapHostPort (expose and unexpose).
  Status MapHostPort(uint16_t host_port, uint32_t addr, uint16_t port);
  Status UnmapHostPort(uint16_t host_port);

  // Adds what the counters counted since the last call to `metrics` (refusals by template and
  // reason, spoofed packets). Once per heartbeat.
  void ExportCounters(Metrics* metrics);

  const NetPlan& plan() const { return plan_; }

 private:
  explicit NetFirewall(const NetPlan& plan);
  // Runs nft commands; the output (text) on success, the error text otherwise.
  Result<std::string> Run(const std::string& commands);

  NetPlan plan_;
  struct nft_ctx* nft_ = nullptr;
  std::map<std::string, uint64_t> exported_;  // counter -> packets already added to metrics
  DynAddresses dyn_;  // what the dyn sets hold, and why
};

}  // namespace sandpool
