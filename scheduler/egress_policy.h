// A job's or session's effective network policy (docs/design/network.md 5.3): what it asks,
// narrowed by what its template allows. Pure code over common/egress_rules.h; used at claim
// time, so a request can only narrow its template's policy, never widen it.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "common/egress_rules.h"
#include "common/status.h"
#include "queue/protocol.h"

namespace sandpool {

struct EgressPolicy {
  std::vector<EgressRule> allow;  // empty: no egress at all
  std::vector<EgressRule> deny;   // wins over `allow` everywhere
  bool operator==(const EgressPolicy&) const = default;
};

// `allow`: nullopt takes the template's allow list as it is; an empty list asks for no egress;
// otherwise each asked rule becomes its intersections with the template's allow rules, and a
// rule with none is an error naming it and the template (asking for more fails loudly instead
// of silently getting less). `deny` is added to the template's. Results are canonical and
// without duplicates, in the order asked.
Result<EgressPolicy> NarrowEgress(const EgressPolicy& tmpl, std::string_view template_name,
                                  const std::optional<std::vector<EgressRule>>& allow,
                                  const std::vector<EgressRule>& deny);

// NarrowEgress for a request as the protocol carries it (queue/protocol.h: canonical strings).
// No request: the template's policy.
Result<EgressPolicy> EffectiveEgress(const EgressPolicy& tmpl, std::string_view template_name,
                                     const std::optional<EgressRequest>& request);

// The policy as results and infos show it (canonical rule strings).
NetworkInfo ShowEgress(const EgressPolicy& policy);

}  // namespace sandpool
