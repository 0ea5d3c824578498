#include "common/egress_rules.h"

#include <algorithm>
#include <set>

namespace sandpool {
namespace {

Status Bad(std::string_view text, std::string_view why) {
  std::string shown(text.substr(0, 64));
  if (text.size() > 64) shown += "...";
  return Status::Error("egress rule '" + shown + "': " + std::string(why));
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// A decimal number of 1..`max_digits` digits, no sign; `leading_zero` allows "007".
std::optional<uint32_t> Number(std::string_view s, size_t max_digits, bool leading_zero) {
  if (s.empty() || s.size() > max_digits) return std::nullopt;
  if (!leading_zero && s.size() > 1 && s[0] == '0') return std::nullopt;
  uint32_t v = 0;
  for (char c : s) {
    if (!IsDigit(c)) return std::nullopt;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  return v;
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return out;
    start = at + 1;
  }
}

// Whether `s` looks like an address someone meant (digits and dots only, or any ':'), so that
// its error speaks of addresses, not names.
bool LooksNumeric(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return IsDigit(c) || c == '.' || c == '/'; });
}

Result<Cidr> ParseCidr(std::string_view text, std::string_view s) {
  size_t slash = s.find('/');
  std::string_view addr = s.substr(0, slash);
  auto parts = Split(addr, '.');
  if (parts.size() != 4) return Bad(text, "an IPv4 address has four parts");
  uint32_t a = 0;
  for (std::string_view p : parts) {
    auto v = Number(p, 3, false);
    if (!v || *v > 255) return Bad(text, "each part of an IPv4 address is 0..255, without leading zeros");
    a = (a << 8) | *v;
  }
  Cidr c;
  c.addr = a;
  c.len = 32;
  if (slash != std::string_view::npos) {
    auto len = Number(s.substr(slash + 1), 2, false);
    if (!len || *len > 32) return Bad(text, "a prefix length is 0..32");
    c.len = static_cast<uint8_t>(*len);
  }
  uint32_t mask = c.len == 0 ? 0 : ~uint32_t{0} << (32 - c.len);
  if ((c.addr & ~mask) != 0) {
    Cidr fixed{c.addr & mask, c.len};
    EgressRule r;
    r.kind = EgressRule::Kind::kCidr;
    r.cidr = fixed;
    return Bad(text, "host bits are set (the range is " + r.ToString() + ")");
  }
  return c;
}

// Lower-cases `s` into `out` if it is a valid name.
Status ParseName(std::string_view text, std::string_view s, std::string* out) {
  if (s.empty()) return Bad(text, "no name");
  if (s.back() == '.') return Bad(text, "a name is written without a trailing dot");
  if (s.size() > 253) return Bad(text, "a name is at most 253 bytes");
  auto labels = Split(s, '.');
  for (std::string_view l : labels) {
    if (l.empty() || l.size() > 63) return Bad(text, "each label of a name is 1..63 bytes");
    for (char c : l) {
      if (!IsAlpha(c) && !IsDigit(c) && c != '-') {
        if (c == '*') return Bad(text, "a wildcard is only '*.' before a name");
        return Bad(text, "a name has letters, digits, '-' and '.' only");
      }
    }
    if (l.front() == '-' || l.back() == '-') return Bad(text, "a label does not begin or end with '-'");
  }
  if (std::all_of(labels.back().begin(), labels.back().end(), IsDigit)) {
    return Bad(text, "the last label of a name is not all digits (an IPv4 address has four parts)");
  }
  out->assign(s);
  for (char& c : *out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return Status::Ok();
}

Result<std::vector<PortRange>> ParsePorts(std::string_view text, std::string_view s) {
  std::vector<PortRange> ports;
  for (std::string_view p : Split(s, ',')) {
    size_t dash = p.find('-');
    auto lo = Number(p.substr(0, dash), 5, true);
    auto hi = dash == std::string_view::npos ? lo : Number(p.substr(dash + 1), 5, true);
    if (!lo || !hi || *lo < 1 || *hi > 65535 || *lo > *hi) {
      return Bad(text, "a port is 1..65535, a range lo-hi with lo <= hi, several separated by ','");
    }
    ports.push_back({static_cast<uint16_t>(*lo), static_cast<uint16_t>(*hi)});
  }
  return ports;
}

}  // namespace

std::vector<PortRange> CanonicalPorts(std::vector<PortRange> ports) {
  std::sort(ports.begin(), ports.end(), [](const PortRange& a, const PortRange& b) { return a.lo < b.lo; });
  std::vector<PortRange> out;
  for (const PortRange& p : ports) {
    if (!out.empty() && uint32_t{p.lo} <= uint32_t{out.back().hi} + 1) {
      out.back().hi = std::max(out.back().hi, p.hi);
    } else {
      out.push_back(p);
    }
  }
  if (out.size() == 1 && out[0].lo == 1 && out[0].hi == 65535) out.clear();
  return out;
}

namespace {

// Ports in both; `every` is set when both allow every port.
std::vector<PortRange> IntersectPorts(const std::vector<PortRange>& a, const std::vector<PortRange>& b, bool* none) {
  *none = false;
  if (a.empty()) return b;
  if (b.empty()) return a;
  std::vector<PortRange> out;
  for (const PortRange& x : a) {
    for (const PortRange& y : b) {
      uint16_t lo = std::max(x.lo, y.lo), hi = std::min(x.hi, y.hi);
      if (lo <= hi) out.push_back({lo, hi});
    }
  }
  *none = out.empty();
  return CanonicalPorts(std::move(out));
}

void AppendCidr(std::string& out, const Cidr& c) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    out += std::to_string((c.addr >> shift) & 0xff);
    if (shift) out += '.';
  }
  out += '/' + std::to_string(c.len);
}

// `name` strictly below `suffix` ("a.b.c" below "b.c", not "b.c" itself nor "xb.c").
bool Below(const std::string& name, const std::string& suffix) {
  return name.size() > suffix.size() + 1 && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         name[name.size() - suffix.size() - 1] == '.';
}

// The narrower of two address filters (none: every address), or nothing when they do not nest.
std::optional<std::optional<Cidr>> NarrowerFilter(const std::optional<Cidr>& a, const std::optional<Cidr>& b) {
  if (!a) return b;
  if (!b) return a;
  if (a->Contains(*b)) return b;
  if (b->Contains(*a)) return a;
  return std::nullopt;
}

}  // namespace

bool EgressRuleMatchesName(const EgressRule& rule, std::string_view name) {
  switch (rule.kind) {
    case EgressRule::Kind::kName: return rule.name == name;
    case EgressRule::Kind::kWildcard: return Below(std::string(name), rule.name);
    case EgressRule::Kind::kCidr: return false;
  }
  return false;
}

std::string Cidr::ToString() const {
  std::string out;
  AppendCidr(out, *this);
  return out;
}

bool Cidr::Contains(const Cidr& o) const {
  if (o.len < len) return false;
  uint32_t mask = len == 0 ? 0 : ~uint32_t{0} << (32 - len);
  return (o.addr & mask) == addr;
}

std::string EgressRule::ToString() const {
  std::string out;
  switch (kind) {
    case Kind::kName:
      out = name;
      break;
    case Kind::kWildcard:
      out = "*." + name;
      break;
    case Kind::kCidr:
      AppendCidr(out, cidr);
      break;
  }
  if (within) {
    out += '@';
    AppendCidr(out, *within);
  }
  for (size_t i = 0; i < ports.size(); ++i) {
    out += i == 0 ? ':' : ',';
    out += std::to_string(ports[i].lo);
    if (ports[i].hi != ports[i].lo) out += '-' + std::to_string(ports[i].hi);
  }
  return out;
}

Result<EgressRule> ParseEgressRule(std::string_view text) {
  if (text.size() > kMaxEgressRuleBytes) return Bad(text, "longer than 300 bytes");
  if (text.find('[') != std::string_view::npos || std::count(text.begin(), text.end(), ':') > 1) {
    return Bad(text, "IPv6 is not supported: sandboxes have no IPv6");
  }
  EgressRule r;
  std::string_view target = text;
  size_t colon = text.find(':');
  if (colon != std::string_view::npos) {
    auto ports = ParsePorts(text, text.substr(colon + 1));
    if (!ports.ok()) return ports.status();
    r.ports = CanonicalPorts(std::move(*ports));
    target = text.substr(0, colon);
  }
  size_t at = target.find('@');
  if (at != std::string_view::npos) {
    auto within = ParseCidr(text, target.substr(at + 1));
    if (!within.ok()) return within.status();
    r.within = *within;
    target = target.substr(0, at);
  }
  if (target.empty()) return Bad(text, "no target (a name, '*.' and a name, or an IPv4 address or range)");
  if (target.rfind("*.", 0) == 0) {
    r.kind = EgressRule::Kind::kWildcard;
    SP_RETURN_IF_ERROR(ParseName(text, target.substr(2), &r.name));
  } else if (LooksNumeric(target)) {
    if (r.within) return Bad(text, "an address filter ('@') follows a name, not an address");
    r.kind = EgressRule::Kind::kCidr;
    auto c = ParseCidr(text, target);
    if (!c.ok()) return c.status();
    r.cidr = *c;
  } else {
    r.kind = EgressRule::Kind::kName;
    SP_RETURN_IF_ERROR(ParseName(text, target, &r.name));
  }
  return r;
}

Result<std::vector<EgressRule>> ParseEgressRules(const std::vector<std::string>& texts, std::string_view field) {
  if (texts.size() > kMaxEgressRules) {
    return Status::Error(std::string(field) + ": at most " + std::to_string(kMaxEgressRules) + " rules");
  }
  std::vector<EgressRule> out;
  std::set<std::string> seen;
  for (const std::string& t : texts) {
    auto r = ParseEgressRule(t);
    if (!r.ok()) return r.status().Prefixed(field);
    if (seen.insert(r->ToString()).second) out.push_back(std::move(*r));
  }
  return out;
}

std::optional<EgressRule> IntersectEgressRule(const EgressRule& ceiling, const EgressRule& want) {
  using Kind = EgressRule::Kind;
  bool no_ports = false;
  std::vector<PortRange> ports = IntersectPorts(ceiling.ports, want.ports, &no_ports);
  if (no_ports) return std::nullopt;
  EgressRule out;
  out.ports = std::move(ports);
  const EgressRule* a = &ceiling;
  const EgressRule* b = &want;
  if (a->kind == Kind::kCidr && b->kind == Kind::kCidr) {
    if (a->cidr.Contains(b->cidr)) out.cidr = b->cidr;
    else if (b->cidr.Contains(a->cidr)) out.cidr = a->cidr;
    else return std::nullopt;
    out.kind = Kind::kCidr;
    return out;
  }
  // A name and an address range: nothing. The range lets addresses be reached, not names be
  // resolved, and resolving is itself egress (the query leaves through the DNS proxy).
  if (a->kind == Kind::kCidr || b->kind == Kind::kCidr) return std::nullopt;
  // Two names: equal, one below a wildcard, or nested wildcards.
  auto filter = NarrowerFilter(a->within, b->within);
  if (!filter) return std::nullopt;
  out.within = *filter;
  if (a->kind == Kind::kName && b->kind == Kind::kName) {
    if (a->name != b->name) return std::nullopt;
    out.kind = Kind::kName;
    out.name = a->name;
  } else if (a->kind == Kind::kWildcard && b->kind == Kind::kWildcard) {
    if (a->name == b->name || Below(b->name, a->name)) out.name = b->name;
    else if (Below(a->name, b->name)) out.name = a->name;
    else return std::nullopt;
    out.kind = Kind::kWildcard;
  } else {
    const EgressRule& wild = a->kind == Kind::kWildcard ? *a : *b;
    const EgressRule& name = a->kind == Kind::kWildcard ? *b : *a;
    if (!Below(name.name, wild.name)) return std::nullopt;
    out.kind = Kind::kName;
    out.name = name.name;
  }
  return out;
}

}  // namespace sandpool
