#include "scheduler/egress_policy.h"

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

}  // namespace
}  // namespace sandpool
