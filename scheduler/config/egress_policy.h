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

// What a policy says of a name the resolver is asked (docs/design/network.md 4.2, 4.3): whether
// it may be resolved (a deny rule matches: no; else any allow rule that matches: yes), and by
// which rules, since each rule grants its own ports, at the addresses its own filter holds.
struct NameVerdict {
  bool allowed = false;
  struct Grant {
    std::optional<Cidr> within;    // the rule's address filter (none: every address)
    std::vector<PortRange> ports;  // canonical; empty: all
  };
  std::vector<Grant> grants;  // one per matching allow rule

  // Whether no matching rule's filter holds `addr` (an answer may not use it).
  bool Filtered(uint32_t addr) const;
  // The ports `addr` is opened on (canonical, empty: all): those of the rules whose filter
  // holds it, and no others; a rule's ports never reach an address only another rule's filter
  // lets in.
  std::vector<PortRange> PortsFor(uint32_t addr) const;
};
// `name`: lower case, no trailing dot, as the resolver read it; a name with any byte but
// [a-z0-9_.-] (ldns escapes them) matches nothing.
NameVerdict JudgeName(const EgressPolicy& policy, std::string_view name);

// The policy as results and infos show it (canonical rule strings).
NetworkInfo ShowEgress(const EgressPolicy& policy);

}  // namespace sandpool
