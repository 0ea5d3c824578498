// Everything the daemon runs for network templates, set up once in main() before the spawner is
// forked (the process has one thread then: the preview proxy is forked here, and the table must
// exist before any keeper can make a slot's link): the plan (nft_ruleset.h), the resolver's
// sockets (dns_proxy.h), the preview proxy (preview_proxy.h) and its routes (port_exposure.h),
// and the loaded table (net_firewall.h). Empty when no template has network.
#pragma once

#include <functional>
#include <memory>

#include "common/status.h"
#include "scheduler/config/config.h"
#include "scheduler/net/conntrack_flusher.h"
#include "scheduler/net/dns_proxy.h"
#include "scheduler/net/net_firewall.h"
#include "scheduler/net/nft_ruleset.h"
#include "scheduler/net/port_exposure.h"
#include "scheduler/preview/preview_proxy.h"

namespace sandpool {

struct Network {
  std::unique_ptr<NetPlan> plan;  // stable address: the resolver reads it
  std::unique_ptr<DnsProxy> dns;
  std::unique_ptr<PreviewProxy> preview;
  std::unique_ptr<PortExposure> exposure;
  std::unique_ptr<NetFirewall> firewall;  // destroyed before the sockets it guards
  std::unique_ptr<ConntrackFlusher> flusher;  // made by Start; destroyed first (its thread)

  // Serves on `base` from now on (the resolver; the flusher's callbacks). On the loop.
  Status Start(struct event_base* base, Metrics* metrics);

  // A job or session of network template `t` whose policy is narrower than the template's runs
  // in slot `slot`: the table and the resolver apply `policy` to that slot (on the loop, about
  // a millisecond or two of nft work), and the slot's old flows are forgotten (conntrack_flush.h:
  // a dump of the whole conntrack table, so off the loop, conntrack_flusher.h). `done` is
  // called on the loop once all of it is done or failed, never before Narrow returned; the
  // caller runs the code only then, and only on success. Reset undoes it when the job or
  // session ends (also after a failed Narrow).
  void Narrow(uint32_t t, uint32_t slot, const EgressPolicy& policy, std::function<void(Status)> done);
  void Reset(uint32_t t, uint32_t slot);

 private:
  const NetPlan::Template* Find(uint32_t t) const;  // template t's plan, if it has network and a table
};

// REQUIRES: root, one thread. Fills each network template's sandbox.network (PlanNetwork).
Result<Network> SetUpNetwork(DaemonConfig* config);

}  // namespace sandpool
