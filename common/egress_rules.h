// Egress rules: the one grammar of a network policy (docs/design/network.md 5.1), shared by the
// daemon's config, the protocol, the CLI and results. Pure code: no DNS, no kernel, no I/O.
//
//   rule    = target [ "@" cidr ] [ ":" ports ]
//   target  = name | "*." name | cidr
//   cidr    = ipv4 [ "/" len ]            dotted quad, no leading zeros; len 0..32
//   ports   = port *( "," port ) ;  port = 1*5DIGIT [ "-" 1*5DIGIT ]   (1..65535, TCP and UDP)
//
// A name is LDH labels (letters, digits, inner hyphens; 1..63 bytes each, 253 in all) whose last
// label is not all digits; "*.a.b" matches every name strictly below a.b (not a.b itself). The
// "@cidr" part is an address filter on a name: its DNS answers count only inside that range
// (`*.npmjs.org@104.16.0.0/12:443`, so that the name cannot be made to point elsewhere). IPv6
// targets are refused: sandboxes have none.
//
// Canonical form (ToString, what compares equal, what results show): names in lower case; a
// CIDR always with its length ("/32" included); ports sorted, overlapping and adjacent ranges
// merged, no port list meaning every port. Input that would need more than case folding to
// become canonical is refused rather than rewritten: a CIDR with host bits set ("10.1.2.3/8"),
// a trailing dot, a port 0. A typo in a security policy must not silently widen it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace sandpool {

inline constexpr size_t kMaxEgressRuleBytes = 300;
inline constexpr size_t kMaxEgressRules = 256;

struct PortRange {
  uint16_t lo = 1, hi = 65535;  // inclusive, 1 <= lo <= hi
  bool operator==(const PortRange&) const = default;
};

struct Cidr {
  uint32_t addr = 0;  // host byte order, host bits clear
  uint8_t len = 32;
  bool Contains(const Cidr& o) const;  // `o` lies wholly inside this
  std::string ToString() const;        // "10.0.0.0/8", the length always written
  bool operator==(const Cidr&) const = default;
};

struct EgressRule {
  enum class Kind : uint8_t { kName, kWildcard, kCidr };
  Kind kind = Kind::kName;
  std::string name;            // kName: the name; kWildcard: the suffix after "*."
  Cidr cidr;                   // kCidr: the range
  std::optional<Cidr> within;  // kName, kWildcard: the address filter ("@cidr")
  std::vector<PortRange> ports;  // canonical; empty = every port

  std::string ToString() const;
  bool operator==(const EgressRule&) const = default;
};

// One rule; the error says what is wrong with it ("egress rule 'x': ...").
Result<EgressRule> ParseEgressRule(std::string_view text);

// A list (an `allow` or `deny` field, a config value split on spaces). `field` names it in
// errors. At most kMaxEgressRules rules of at most kMaxEgressRuleBytes each; duplicates (after
// canonicalization) are dropped, order otherwise kept.
Result<std::vector<EgressRule>> ParseEgressRules(const std::vector<std::string>& texts, std::string_view field);

// Port ranges in canonical form: sorted, overlapping and adjacent ranges merged, every port
// written as none (empty). What rules hold, and what one address's elements must be (an
// interval set refuses overlapping ones).
std::vector<PortRange> CanonicalPorts(std::vector<PortRange> ports);

// Whether a name rule allows resolving `name` (lower case, no trailing dot): the same name for a
// name rule, a name strictly below for a wildcard. CIDR rules allow no name.
bool EgressRuleMatchesName(const EgressRule& rule, std::string_view name);

// What `want` asks that `ceiling` allows (section 5.3), or nullopt when nothing:
//  - names: equal names; a name strictly below a wildcard; the narrower of two nested wildcards;
//    with address filters, the narrower filter (filters that do not nest: nothing);
//  - CIDRs: the longer of two nested ranges;
//  - a name and a CIDR: nothing (a range allows addresses, not resolving names: a DNS query is
//    itself egress, so only a name rule of the ceiling lets a name be resolved);
//  - ports: the intersection of the two sets (none in common: nothing).
std::optional<EgressRule> IntersectEgressRule(const EgressRule& ceiling, const EgressRule& want);

}  // namespace sandpool
