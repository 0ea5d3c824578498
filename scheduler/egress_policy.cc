#include "scheduler/egress_policy.h"

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

NetworkInfo ShowEgress(const EgressPolicy& policy) {
  NetworkInfo out;
  for (const EgressRule& r : policy.allow) out.allow.push_back(r.ToString());
  for (const EgressRule& r : policy.deny) out.deny.push_back(r.ToString());
  return out;
}

}  // namespace sandpool
