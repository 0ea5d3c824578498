// libFuzzer harness: ParseEgressRule and IntersectEgressRule (common/egress_rules.h), which
// will read every egress rule of the config, the protocol and the CLI (issue 10). The input is
// two rules separated by a newline. Properties, beyond "no crash, leak or UBSan report":
//  - an error message starts with "egress rule '";
//  - an accepted rule's canonical form parses back to an equal rule, whose form is the same
//    (canonical is a fixed point), within the length limit;
//  - a rule meets itself as itself;
//  - an intersection is never wider than either side: it meets each side as itself, and is
//    symmetric for two names or two ranges.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/egress_rules.h"
#include "tests/fuzz/fuzz_check.h"

namespace sandpool {
namespace {

std::optional<EgressRule> Check(std::string_view text) {
  auto r = ParseEgressRule(text);
  if (!r.ok()) {
    FUZZ_CHECK(r.status().message().rfind("egress rule '", 0) == 0, "errors name the rule");
    return std::nullopt;
  }
  std::string canon = r->ToString();
  auto again = ParseEgressRule(canon);
  FUZZ_CHECK(again.ok(), "the canonical form parses");
  FUZZ_CHECK(*again == *r, "the canonical form parses to the same rule");
  FUZZ_CHECK(again->ToString() == canon, "the canonical form is a fixed point");
  auto self = IntersectEgressRule(*r, *r);
  FUZZ_CHECK(self && *self == *r, "a rule meets itself as itself");
  return *r;
}

}  // namespace
}  // namespace sandpool

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandpool;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t nl = in.find('\n');
  auto a = Check(in.substr(0, nl));
  if (nl == std::string_view::npos) return 0;
  auto b = Check(in.substr(nl + 1));
  if (!a || !b) return 0;
  auto ab = IntersectEgressRule(*a, *b);
  auto ba = IntersectEgressRule(*b, *a);
  if (ab) {
    auto with_a = IntersectEgressRule(*a, *ab);
    auto with_b = IntersectEgressRule(*b, *ab);
    FUZZ_CHECK(with_a && *with_a == *ab, "an intersection lies inside its ceiling");
    FUZZ_CHECK(with_b && *with_b == *ab, "an intersection lies inside what was asked");
  }
  bool same_kind = (a->kind == EgressRule::Kind::kCidr) == (b->kind == EgressRule::Kind::kCidr);
  if (same_kind) FUZZ_CHECK(ab.has_value() == ba.has_value() && (!ab || *ab == *ba), "symmetric");
  return 0;
}
