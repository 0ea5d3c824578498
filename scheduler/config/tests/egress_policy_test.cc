#include "scheduler/config/egress_policy.h"

#include <gtest/gtest.h>

namespace sandpool {
namespace {

std::vector<EgressRule> Rules(const std::vector<std::string>& texts) {
  auto r = ParseEgressRules(texts, "test");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : std::vector<EgressRule>{};
}

std::vector<std::string> Texts(const std::vector<EgressRule>& rules) {
  std::vector<std::string> out;
  for (const EgressRule& r : rules) out.push_back(r.ToString());
  return out;
}

const EgressPolicy kWeb{Rules({"registry.npmjs.org:443", "*.npmjs.org:443", "203.0.113.0/24:80,443"}),
                        Rules({"evil.npmjs.org"})};

TEST(EgressPolicy, NothingAskedIsTheTemplatesPolicy) {
  auto p = NarrowEgress(kWeb, "web", std::nullopt, {});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, kWeb);
}

TEST(EgressPolicy, AnEmptyAllowListIsNoEgress) {
  auto p = NarrowEgress(kWeb, "web", std::vector<EgressRule>{}, {});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->allow.empty());
  EXPECT_EQ(Texts(p->deny), std::vector<std::string>{"evil.npmjs.org"});
}

TEST(EgressPolicy, AskedRulesAreNarrowedNeverWidened) {
  auto p = NarrowEgress(kWeb, "web", Rules({"registry.npmjs.org", "203.0.113.7:443", "*.x.npmjs.org"}),
                        Rules({"203.0.113.9"}));
  ASSERT_TRUE(p.ok()) << p.status().message();
  // registry.npmjs.org meets both the name rule and the wildcard: one rule, ports of the template.
  EXPECT_EQ(Texts(p->allow), (std::vector<std::string>{"registry.npmjs.org:443", "203.0.113.7/32:443",
                                                         "*.x.npmjs.org:443"}));
  EXPECT_EQ(Texts(p->deny), (std::vector<std::string>{"evil.npmjs.org", "203.0.113.9/32"}));
}

TEST(EgressPolicy, AskingForSomethingElseFailsLoudly) {
  for (const char* outside : {"pypi.org", "npmjs.org:443", "203.0.113.7:22", "198.51.100.1", "registry.npmjs.org:80"}) {
    auto p = NarrowEgress(kWeb, "web", Rules({"registry.npmjs.org", outside}), {});
    ASSERT_FALSE(p.ok()) << outside;
    EXPECT_NE(p.status().message().find("is outside what template 'web' allows"), std::string::npos)
        << p.status().message();
  }
}

TEST(EgressPolicy, AskingForMoreGetsTheTemplatesPart) {
  // Wider than the template but overlapping it: the overlap, never more.
  auto p = NarrowEgress(kWeb, "web", Rules({"203.0.112.0/23", "*.org"}), {});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(Texts(p->allow),
            (std::vector<std::string>{"203.0.113.0/24:80,443", "registry.npmjs.org:443", "*.npmjs.org:443"}));
}

TEST(EgressPolicy, ANoNetworkTemplateAllowsNothing) {
  EgressPolicy none;
  EXPECT_FALSE(NarrowEgress(none, "plain", Rules({"a.example"}), {}).ok());
  auto p = NarrowEgress(none, "plain", std::nullopt, Rules({"a.example"}));
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->allow.empty());
}

// 198.51.100.7 and 203.0.113.7 (host byte order).
constexpr uint32_t kA = 0xc6336407, kB = 0xcb007107;

TEST(JudgeName, EachRuleGrantsItsOwnPortsAtTheAddressesItsFilterHolds) {
  // Two filtered rules for one name: an address gets the ports of the rule whose filter holds
  // it, never the other rule's (no cross product of filters and ports).
  EgressPolicy p{Rules({"x.example@198.51.100.0/24:443", "x.example@203.0.113.0/24:80"}), {}};
  NameVerdict v = JudgeName(p, "x.example");
  ASSERT_TRUE(v.allowed);
  EXPECT_EQ(v.PortsFor(kA), (std::vector<PortRange>{{443, 443}}));
  EXPECT_EQ(v.PortsFor(kB), (std::vector<PortRange>{{80, 80}}));
  EXPECT_FALSE(v.Filtered(kA));
  EXPECT_FALSE(v.Filtered(kB));
  EXPECT_TRUE(v.Filtered(0x08080808));  // in neither filter: the answer may not use it
}

TEST(JudgeName, AnUnfilteredRuleAddsItsPortsEverywhere) {
  EgressPolicy p{Rules({"x.example@198.51.100.0/24:443", "*.example:8080", "x.example@203.0.113.0/24"}), {}};
  NameVerdict v = JudgeName(p, "x.example");
  EXPECT_EQ(v.PortsFor(kA), (std::vector<PortRange>{{443, 443}, {8080, 8080}}));
  EXPECT_TRUE(v.PortsFor(kB).empty());  // every port: the third rule names none
  EXPECT_EQ(v.PortsFor(0x08080808), (std::vector<PortRange>{{8080, 8080}}));
  EXPECT_FALSE(v.Filtered(0x08080808));
}

TEST(JudgeName, DenyWinsAndOddNamesMatchNothing) {
  EgressPolicy p{Rules({"*.example:443"}), Rules({"evil.example"})};
  EXPECT_FALSE(JudgeName(p, "evil.example").allowed);
  EXPECT_FALSE(JudgeName(p, "x\\.y.example").allowed);
  EXPECT_FALSE(JudgeName(p, "other.test").allowed);
  EXPECT_TRUE(JudgeName(p, "good.example").allowed);
}

}  // namespace
}  // namespace sandpool
