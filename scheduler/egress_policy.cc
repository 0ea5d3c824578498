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

}  // namespace sandpool
