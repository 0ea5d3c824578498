#include "scheduler/config/egress_policy.h"

#include <algorithm>
#include <set>
#include <string>

namespace sandpool {
namespace {

void AddOnce(std::vector<EgressRule>& out, std::set<std::string>& seen, EgressRule r) {
  if (seen.insert(r.ToString()).second) out.push_back(std::move(r));
}

}  // namespace

Result<EgressPolicy> NarrowEgress(const EgressPolicy& tmpl, std::string_view template_name,
                                  const std::optional<std::vector<EgressRule>>& allow,
                                  const std::vector<EgressRule>& deny) {
  EgressPolicy out;
  std::set<std::string> seen;
  if (!allow) {
    for (const EgressRule& r : tmpl.allow) AddOnce(out.allow, seen, r);
  } else {
    for (const EgressRule& want : *allow) {
      bool any = false;
      for (const EgressRule& ceiling : tmpl.allow) {
        if (auto r = IntersectEgressRule(ceiling, want)) {
          AddOnce(out.allow, seen, std::move(*r));
          any = true;
        }
      }
      if (!any) {
        return Status::Error("egress: rule '" + want.ToString() + "' is outside what template '" +
                             std::string(template_name) + "' allows");
      }
    }
  }
  seen.clear();
  for (const EgressRule& r : tmpl.deny) AddOnce(out.deny, seen, r);
  for (const EgressRule& r : deny) AddOnce(out.deny, seen, r);
  return out;
}

Result<EgressPolicy> EffectiveEgress(const EgressPolicy& tmpl, std::string_view template_name,
                                     const std::optional<EgressRequest>& request) {
  if (!request) return tmpl;
  std::optional<std::vector<EgressRule>> allow;
  if (request->allow) {
    auto a = ParseEgressRules(*request->allow, "egress.allow");
    if (!a.ok()) return a.status();
    allow = std::move(a.value());
  }
  auto deny = ParseEgressRules(request->deny, "egress.deny");
  if (!deny.ok()) return deny.status();
  return NarrowEgress(tmpl, template_name, allow, *deny);
}

bool NameVerdict::Filtered(uint32_t addr) const {
  return std::none_of(grants.begin(), grants.end(),
                      [&](const Grant& g) { return !g.within || g.within->Contains(Cidr{addr, 32}); });
}

std::vector<PortRange> NameVerdict::PortsFor(uint32_t addr) const {
  std::vector<PortRange> ports;
  for (const Grant& g : grants) {
    if (g.within && !g.within->Contains(Cidr{addr, 32})) continue;
    if (g.ports.empty()) return {};
    ports.insert(ports.end(), g.ports.begin(), g.ports.end());
  }
  return CanonicalPorts(std::move(ports));
}

NameVerdict JudgeName(const EgressPolicy& policy, std::string_view name) {
  NameVerdict v;
  // ldns writes a dot or other byte inside a label escaped ("x\.foo"): such a name is not one a
  // rule could mean, and its text would not say where its labels end.
  if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
      })) {
    return v;
  }
  for (const EgressRule& r : policy.deny) {
    if (EgressRuleMatchesName(r, name)) return v;
  }
  for (const EgressRule& r : policy.allow) {
    if (!EgressRuleMatchesName(r, name)) continue;
    v.allowed = true;
    v.grants.push_back(NameVerdict::Grant{r.within, r.ports});
  }
  return v;
}

NetworkInfo ShowEgress(const EgressPolicy& policy) {
  NetworkInfo out;
  for (const EgressRule& r : policy.allow) out.allow.push_back(r.ToString());
  for (const EgressRule& r : policy.deny) out.deny.push_back(r.ToString());
  return out;
}

}  // namespace sandpool
