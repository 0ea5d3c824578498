#include "common/egress_rules.h"

#include <gtest/gtest.h>

namespace sandpool {
namespace {

std::string Canon(std::string_view text) {
  auto r = ParseEgressRule(text);
  return r.ok() ? r->ToString() : "ERROR: " + r.status().message();
}

bool Refused(std::string_view text, std::string_view why) {
  auto r = ParseEgressRule(text);
  return !r.ok() && r.status().message().find(why) != std::string::npos;
}

TEST(EgressRules, CanonicalForms) {
  EXPECT_EQ(Canon("registry.npmjs.org"), "registry.npmjs.org");
  EXPECT_EQ(Canon("Registry.NPMJS.org:443"), "registry.npmjs.org:443");
  EXPECT_EQ(Canon("*.npmjs.org:443"), "*.npmjs.org:443");
  EXPECT_EQ(Canon("203.0.113.7"), "203.0.113.7/32");
  EXPECT_EQ(Canon("203.0.113.0/24:80,443"), "203.0.113.0/24:80,443");
  EXPECT_EQ(Canon("0.0.0.0/0"), "0.0.0.0/0");
  EXPECT_EQ(Canon("pypi.org@151.101.0.0/16:443"), "pypi.org@151.101.0.0/16:443");
  // Ports: sorted, merged when they overlap or touch, all of them written as none.
  EXPECT_EQ(Canon("a.example:443,80,81,82-90,8000-8999,8500"), "a.example:80-90,443,8000-8999");
  EXPECT_EQ(Canon("a.example:1-65535"), "a.example");
  EXPECT_EQ(Canon("a.example:1-100,101-65535"), "a.example");
  EXPECT_EQ(Canon("a.example:0443"), "a.example:443");
  EXPECT_EQ(Canon("x-1.b2.example"), "x-1.b2.example");
}

TEST(EgressRules, RefusedWithAReason) {
  EXPECT_TRUE(Refused("10.1.2.3/8", "host bits are set (the range is 10.0.0.0/8)"));
  EXPECT_TRUE(Refused("example.org.", "trailing dot"));
  EXPECT_TRUE(Refused("a.example:0", "a port is 1..65535"));
  EXPECT_TRUE(Refused("a.example:65536", "a port is 1..65535"));
  EXPECT_TRUE(Refused("a.example:90-80", "lo <= hi"));
  EXPECT_TRUE(Refused("a.example:", "a port is"));
  EXPECT_TRUE(Refused("a.example:80,", "a port is"));
  EXPECT_TRUE(Refused("a.example:http", "a port is"));
  EXPECT_TRUE(Refused("::1", "IPv6"));
  EXPECT_TRUE(Refused("[2001:db8::1]:443", "IPv6"));
  EXPECT_TRUE(Refused("2001:db8::/32", "IPv6"));
  EXPECT_TRUE(Refused("1.2.3", "four parts"));
  EXPECT_TRUE(Refused("1.2.3.256", "0..255"));
  EXPECT_TRUE(Refused("01.2.3.4", "leading zeros"));
  EXPECT_TRUE(Refused("1.2.3.4/33", "prefix length"));
  EXPECT_TRUE(Refused("1.2.3.4/", "prefix length"));
  EXPECT_TRUE(Refused("a.123", "not all digits"));
  EXPECT_TRUE(Refused("*", "wildcard is only"));
  EXPECT_TRUE(Refused("*.", "no name"));
  EXPECT_TRUE(Refused("**.example", "wildcard is only"));
  EXPECT_TRUE(Refused("a.*.example", "wildcard is only"));
  EXPECT_TRUE(Refused("foo*.example", "wildcard is only"));
  EXPECT_TRUE(Refused("-a.example", "'-'"));
  EXPECT_TRUE(Refused("a-.example", "'-'"));
  EXPECT_TRUE(Refused("a..example", "1..63"));
  EXPECT_TRUE(Refused(std::string(64, 'a') + ".example", "1..63"));
  EXPECT_TRUE(Refused("a_b.example", "letters, digits"));
  EXPECT_TRUE(Refused("a.example/24", "letters, digits"));
  EXPECT_TRUE(Refused("", "no target"));
  EXPECT_TRUE(Refused(":443", "no target"));
  EXPECT_TRUE(Refused("1.2.3.4@5.6.7.0/24", "follows a name"));
  EXPECT_TRUE(Refused("a.example@5.6.7.8/24", "host bits"));
  EXPECT_TRUE(Refused(std::string(301, 'a'), "longer than 300"));
  // A name of 253 bytes is the most.
  std::string l63(63, 'a');
  std::string name253 = l63 + "." + l63 + "." + l63 + "." + std::string(61, 'b');
  ASSERT_EQ(name253.size(), 253u);
  EXPECT_EQ(Canon(name253), name253);
  EXPECT_TRUE(Refused(name253 + "c", "at most 253"));
}

TEST(EgressRules, ListsAreBoundedAndWithoutDuplicates) {
  auto r = ParseEgressRules({"A.example:443", "a.example:443", "b.example", "a.example:443,443"}, "allow");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].ToString(), "a.example:443");
  EXPECT_EQ((*r)[1].ToString(), "b.example");
  auto bad = ParseEgressRules({"ok.example", "10.0.0.1/8"}, "egress.deny");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("egress.deny: egress rule '10.0.0.1/8'", 0), 0u) << bad.status().message();
  std::vector<std::string> many(kMaxEgressRules + 1, "a.example");
  EXPECT_FALSE(ParseEgressRules(many, "allow").ok());
}

std::string Meet(std::string_view ceiling, std::string_view want) {
  auto c = ParseEgressRule(ceiling);
  auto w = ParseEgressRule(want);
  if (!c.ok() || !w.ok()) return "BAD INPUT";
  auto r = IntersectEgressRule(*c, *w);
  return r ? r->ToString() : "nothing";
}

TEST(EgressRules, Intersections) {
  // Names.
  EXPECT_EQ(Meet("a.example", "a.example"), "a.example");
  EXPECT_EQ(Meet("a.example", "b.example"), "nothing");
  EXPECT_EQ(Meet("*.npmjs.org", "registry.npmjs.org"), "registry.npmjs.org");
  EXPECT_EQ(Meet("registry.npmjs.org", "*.npmjs.org"), "registry.npmjs.org");
  EXPECT_EQ(Meet("*.npmjs.org", "npmjs.org"), "nothing");  // strictly below
  EXPECT_EQ(Meet("*.npmjs.org", "evilnpmjs.org"), "nothing");
  EXPECT_EQ(Meet("*.npmjs.org", "a.b.npmjs.org"), "a.b.npmjs.org");
  EXPECT_EQ(Meet("*.a.b", "*.c.a.b"), "*.c.a.b");
  EXPECT_EQ(Meet("*.c.a.b", "*.a.b"), "*.c.a.b");
  EXPECT_EQ(Meet("*.a.b", "*.a.b"), "*.a.b");
  EXPECT_EQ(Meet("*.a.b", "*.x.b"), "nothing");
  // Address ranges.
  EXPECT_EQ(Meet("203.0.113.0/24", "203.0.113.7"), "203.0.113.7/32");
  EXPECT_EQ(Meet("203.0.113.7", "203.0.113.0/24"), "203.0.113.7/32");
  EXPECT_EQ(Meet("203.0.113.0/25", "203.0.113.128/25"), "nothing");
  EXPECT_EQ(Meet("0.0.0.0/0", "198.51.100.0/24"), "198.51.100.0/24");
  // A range allows addresses, not resolving names (a query is egress too); an address under a
  // name is not knowable without resolving. Both: nothing.
  EXPECT_EQ(Meet("151.101.0.0/16:443", "pypi.org"), "nothing");
  EXPECT_EQ(Meet("151.101.0.0/16", "*.pypi.org@151.101.64.0/18"), "nothing");
  EXPECT_EQ(Meet("pypi.org", "151.101.1.1"), "nothing");
  // Address filters on names narrow like ranges.
  EXPECT_EQ(Meet("pypi.org@151.101.0.0/16", "pypi.org@151.101.64.0/18"), "pypi.org@151.101.64.0/18");
  EXPECT_EQ(Meet("pypi.org@151.101.0.0/16", "pypi.org"), "pypi.org@151.101.0.0/16");
  EXPECT_EQ(Meet("pypi.org@151.101.0.0/16", "pypi.org@10.0.0.0/8"), "nothing");
  EXPECT_EQ(Meet("*.pypi.org@151.101.0.0/16", "files.pypi.org@151.101.64.0/18:443"),
            "files.pypi.org@151.101.64.0/18:443");
  // Ports.
  EXPECT_EQ(Meet("a.example:80,443", "a.example:443"), "a.example:443");
  EXPECT_EQ(Meet("a.example:443", "a.example"), "a.example:443");
  EXPECT_EQ(Meet("a.example:8000-8999", "a.example:80,8080-9100"), "a.example:8080-8999");
  EXPECT_EQ(Meet("a.example:80", "a.example:443"), "nothing");
  EXPECT_EQ(Meet("*.example:1-1000", "*.x.example:500-2000,20"), "*.x.example:20,500-1000");
}

TEST(EgressRules, CidrContains) {
  Cidr all{0, 0}, ten{0x0a000000, 8}, host{0x0a010203, 32};
  EXPECT_TRUE(all.Contains(ten));
  EXPECT_TRUE(ten.Contains(host));
  EXPECT_TRUE(host.Contains(host));
  EXPECT_FALSE(host.Contains(ten));
  EXPECT_FALSE(ten.Contains(Cidr{0x0b000000, 8}));
}

}  // namespace
}  // namespace sandpool
