#include "scheduler/net/net_setup.h"

#include <unistd.h>

#include <algorithm>

#include "common/log.h"
#include "scheduler/jobs/pools.h"
#include "worker/sandbox/conntrack_flush.h"
#include "worker/sandbox/netns_setup.h"

namespace sandpool {
namespace {

std::string PreviewUrlBase(const std::string& configured, uint16_t port) {
  std::string url = configured;
  if (url.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    url = std::string("http://") + (host[0] ? host : "localhost") + ":{port}/";
  }
  size_t at = url.find("{port}");
  if (at != std::string::npos) url.replace(at, 6, std::to_string(port));
  if (url.back() != '/') url += '/';
  return url;
}

}  // namespace

Result<Network> SetUpNetwork(DaemonConfig* config) {
  Network net;
  auto plan = PlanNetwork(config);
  if (!plan.ok()) return plan.status();
  net.plan = std::make_unique<NetPlan>(std::move(plan.value()));
  if (net.plan->empty()) return net;
  // The resolver's ports go into the table, so its sockets come first.
  const NetConfig& c = config->net;
  auto dns = DnsProxy::Bind(net.plan.get(), DnsOptions{c.dns_upstream, c.dns_ttl_min, c.dns_ttl_max, c.dns_qps});
  if (!dns.ok()) return dns.status();
  net.dns = std::move(dns.value());
  bool exposes = std::any_of(config->templates.begin(), config->templates.end(), [](const TemplateConfig& t) { return t.expose; });
  if (exposes && c.preview_listen != "off") {
    // Its own host uid, the first past the slots' (docs/SECURITY.md section 5).
    uint32_t uid = static_cast<uint32_t>(config->sandbox.host_id_base + Pools::UidSpan(*config));
    auto preview = PreviewProxy::Start(c.preview_listen, uid);
    if (!preview.ok()) return preview.status();
    net.preview = std::move(preview.value());
    net.plan->preview_uid = uid;
    net.plan->host_port_lo = c.host_port_lo;
    net.plan->host_port_hi = c.host_port_hi;
    net.exposure = std::make_unique<PortExposure>(net.preview.get(), PreviewUrlBase(c.preview_url, net.preview->port()),
                                                  c.host_port_lo, c.host_port_hi);
    LogInfo("preview proxy listening", {{"addr", c.preview_listen}, {"port", net.preview->port()}, {"uid", uid}});
  }
  auto fw = NetFirewall::Install(*net.plan, c.set_ip_forward);
  if (!fw.ok()) return fw.status();
  net.firewall = std::move(fw.value());
  if (net.exposure) net.exposure->SetFirewall(net.firewall.get());
  LogInfo("network table loaded", {{"table", net.plan->table}, {"templates", net.plan->templates.size()}});
  return net;
}

const NetPlan::Template* Network::Find(uint32_t t) const {
  for (const NetPlan::Template& nt : plan->templates) {
    if (nt.index == t) return firewall ? &nt : nullptr;
  }
  return nullptr;
}

Status Network::Start(struct event_base* base, Metrics* metrics) {
  if (dns) SP_RETURN_IF_ERROR(dns->Start(base, firewall.get(), metrics).Prefixed("network templates' resolver"));
  flusher = std::make_unique<ConntrackFlusher>(base);
  return Status::Ok();
}

void Network::Narrow(uint32_t t, uint32_t slot, const EgressPolicy& policy, std::function<void(Status)> done) {
  const NetPlan::Template* tmpl = Find(t);
  Status s = tmpl == nullptr || !flusher ? Status::Error("template " + std::to_string(t) + " has no network") : Status::Ok();
  uint32_t addr = SandboxAddress(plan->pool.addr, slot);
  if (s.ok()) s = firewall->NarrowSlot(t, slot, tmpl->if_prefix + std::to_string(slot), policy);
  if (s.ok()) dns->SetSlotPolicy(addr, slot, &policy);
  if (!s.ok()) {
    // Called back from the loop like a success, so that callers have one path.
    if (flusher) flusher->Defer(std::move(s), std::move(done));
    else done(std::move(s));  // before Start: there is no loop to call back from yet
    return;
  }
  flusher->Flush(addr, [done = std::move(done)](Status flushed) { done(flushed.Prefixed("forgetting the slot's flows")); });
}

void Network::Reset(uint32_t t, uint32_t slot) {
  const NetPlan::Template* tmpl = Find(t);
  if (tmpl == nullptr) return;
  Status s = firewall->ResetSlot(slot, tmpl->if_prefix + std::to_string(slot));
  if (!s.ok()) LogWarn("slot not reset", {{"slot", slot}, {"error", s.message()}});
  dns->SetSlotPolicy(SandboxAddress(plan->pool.addr, slot), slot, nullptr);
}

}  // namespace sandpool
