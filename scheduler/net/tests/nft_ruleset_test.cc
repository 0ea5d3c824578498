#include "scheduler/net/nft_ruleset.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace sandpool {
namespace {

Status Parse(const std::string& conf, std::vector<std::string> args, DaemonConfig* c) {
  std::string path = ::testing::TempDir() + "/net.conf";
  std::ofstream(path) << conf;
  args.insert(args.begin(), {"sandpoold", "--config", path, "--consumer", "host-a"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  bool exit_now;
  return ParseConfig(static_cast<int>(argv.size()), argv.data(), c, &exit_now);
}

constexpr const char* kWeb = "[template web]\nruntime = sh\negress = 198.51.100.10:80,443 203.0.113.0/24\negress-deny = 203.0.113.7\n";

TEST(NftRuleset, PlansNamesAndAddressesForNetworkTemplatesOnly) {
  DaemonConfig c;
  ASSERT_TRUE(Parse(kWeb, {"--net", "on", "--max-sandboxes", "16"}, &c).ok());
  auto plan = PlanNetwork(&c);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(plan->templates.size(), 1u);
  int web = FindTemplate(c, "web");
  EXPECT_EQ(plan->templates[0].index, static_cast<uint32_t>(web));
  EXPECT_EQ(plan->table.rfind("sandpool_", 0), 0u);
  EXPECT_EQ(plan->table.size(), 12u);
  const SlotNetwork& n = c.templates[static_cast<size_t>(web)].sandbox.network;
  EXPECT_TRUE(n.enabled);
  EXPECT_EQ(n.pool_base, 0x0ac80000u);
  EXPECT_EQ(n.host_if_prefix, plan->if_prefix + std::to_string(web) + "-");
  EXPECT_FALSE(c.templates[0].sandbox.network.enabled);  // "default": no egress key
  // Another daemon on the host names its table and links differently.
  DaemonConfig other;
  ASSERT_TRUE(Parse(kWeb, {"--net", "on", "--consumer", "host-b"}, &other).ok());
  EXPECT_NE(PlanNetwork(&other)->table, plan->table);
}

TEST(NftRuleset, AlwaysRefusedCoversPrivateRangesAndThePool) {
  DaemonConfig c;
  ASSERT_TRUE(Parse(kWeb, {"--net", "on", "--net-pool", "100.127.0.0/20"}, &c).ok());
  auto plan = PlanNetwork(&c);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(AlwaysRefused(*plan, 0xa9fea9fe));   // 169.254.169.254
  EXPECT_TRUE(AlwaysRefused(*plan, 0x7f000001));   // 127.0.0.1
  EXPECT_TRUE(AlwaysRefused(*plan, 0xc0a80101));   // 192.168.1.1
  EXPECT_TRUE(AlwaysRefused(*plan, 0x647f0003));   // in the pool (also CGNAT)
  EXPECT_FALSE(AlwaysRefused(*plan, 0xc6336414));  // 198.51.100.20
  EXPECT_FALSE(AlwaysRefused(*plan, 0x08080808));
  // The operator's exemptions open private ranges to policies, never the pool.
  DaemonConfig open;
  ASSERT_TRUE(Parse(kWeb, {"--net", "on", "--net-allow-private", "10.0.0.0/8 169.254.169.254", "--net-refuse", "203.0.113.9 10.9.0.0/16"},
                    &open).ok());
  auto exempted = PlanNetwork(&open);
  ASSERT_TRUE(exempted.ok());
  EXPECT_FALSE(AlwaysRefused(*exempted, 0x0a010203));  // 10.1.2.3
  EXPECT_FALSE(AlwaysRefused(*exempted, 0xa9fea9fe));
  EXPECT_TRUE(AlwaysRefused(*exempted, 0x0ac80005));   // 10.200.0.5: a sandbox
  EXPECT_TRUE(AlwaysRefused(*exempted, 0xc0a80101));
  EXPECT_TRUE(AlwaysRefused(*exempted, 0xcb007109));   // --net-refuse: the host's public NAT address, say
  EXPECT_TRUE(AlwaysRefused(*exempted, 0x0a090001));   // refused even inside an exempt range
  std::string text = NftRuleset(*exempted);
  EXPECT_NE(text.find("set exempt4 { type ipv4_addr; flags interval; auto-merge; elements = { 10.0.0.0/8, 169.254.169.254/32 } }"),
            std::string::npos) << text;
}

TEST(NftRuleset, RefusesAPoolTooSmallForEverySlot) {
  DaemonConfig c;
  ASSERT_TRUE(Parse(kWeb, {"--net", "on", "--net-pool", "10.9.0.0/26", "--max-sandboxes", "64"}, &c).ok());
  auto plan = PlanNetwork(&c);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("--net-pool 10.9.0.0/26 holds 32 slots"), std::string::npos) << plan.status().message();
}

TEST(NftRuleset, WritesThePolicyAsSetsAndRefusalsBeforeIt) {
  DaemonConfig c;
  ASSERT_TRUE(Parse(kWeb, {"--net", "on", "--net-connections", "9", "--net-new-connections", "7"}, &c).ok());
  auto plan = PlanNetwork(&c);
  ASSERT_TRUE(plan.ok());
  std::string text = NftRuleset(*plan);
  std::string t = std::to_string(plan->templates[0].index);
  auto has = [&](const std::string& s) { return text.find(s) != std::string::npos; };
  EXPECT_TRUE(has("elements = { 198.51.100.10/32 . 80, 198.51.100.10/32 . 443, 203.0.113.0/24 . 1-65535 }"));
  EXPECT_TRUE(has("set deny_" + t + " { type ipv4_addr . inet_service; flags interval; elements = { 203.0.113.7/32 . 1-65535 } }"));
  EXPECT_TRUE(has("10.200.0.0/16 } }"));  // the pool is always refused: sandbox to sandbox
  EXPECT_TRUE(has("169.254.0.0/16"));
  EXPECT_TRUE(has("ct count over 9"));
  EXPECT_TRUE(has("limit rate over 7/second burst 14 packets"));
  // Order inside the template's chain: always-refused, then deny, then allow.
  size_t never = text.find("ip daddr @never4"), deny = text.find("@deny_" + t + " counter"),
         allow = text.find("@allow_" + t + " goto");
  EXPECT_LT(never, deny);
  EXPECT_LT(deny, allow);
}

// The text is what the kernel's nftables takes: checked (not applied) with `nft -c`, as root.
TEST(NftRuleset, NftAcceptsTheRuleset) {
  if (::geteuid() != 0 || std::system("nft --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "needs root and nft";
  DaemonConfig c;
  ASSERT_TRUE(Parse(kWeb + std::string("[template api]\negress = 192.0.2.0/24:443\n"), {"--net", "on"}, &c).ok());
  auto plan = PlanNetwork(&c);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->templates.size(), 2u);
  plan->templates[0].dns_port = 35353;  // as DnsProxy::Bind sets them
  plan->templates[1].dns_port = 35354;
  std::string path = ::testing::TempDir() + "/ruleset.nft";
  std::ofstream(path) << NftRuleset(*plan);
  // Loaded (and then a resolver's answer opened on 443, the same address on every port by
  // another name's answer, and back to 443 when that expires: dyn_addresses.h) in a network
  // namespace of its own: nothing of the host's ruleset is read or touched.
  const std::string dyn = DynSet(plan->templates[1].index);
  std::string open = ::testing::TempDir() + "/open.nft";
  std::ofstream(open) << NftChangeAddresses(*plan, {{dyn, 0xc6336414, {}, {{443, 443}}}});
  std::string again = ::testing::TempDir() + "/again.nft";
  std::ofstream(again) << NftChangeAddresses(*plan, {{dyn, 0xc6336414, {{443, 443}}, {{1, 65535}}},
                                                     {dyn, 0xc6336416, {}, {{80, 80}, {443, 500}}}})
                       << NftChangeAddresses(*plan, {{dyn, 0xc6336414, {{1, 65535}}, {{443, 443}}}});
  // A slot narrowed twice (the second replaces the first), then reset.
  EgressPolicy narrow{{*ParseEgressRule("198.51.100.0/24:443"), *ParseEgressRule("x.example")}, {*ParseEgressRule("198.51.100.7")}};
  std::string slot = ::testing::TempDir() + "/slot.nft";
  std::string ifname = plan->templates[1].if_prefix + "17";
  std::ofstream(slot) << NftNarrowSlot(*plan, plan->templates[1].index, 17, ifname, narrow)
                      << NftNarrowSlot(*plan, plan->templates[1].index, 17, ifname, narrow)
                      << NftChangeAddresses(*plan, {{SlotDynSet(17), 0xc6336415, {}, {{1, 65535}}}})
                      << NftResetSlot(*plan, 17, ifname);
  // Separate nft processes, so the table is loaded without `flags owner` (it would go with the
  // process that made it; the daemon keeps its socket, and test_network checks that).
  std::string text = NftRuleset(*plan);
  text.erase(text.find("  flags owner;\n"), 15);
  std::ofstream(path) << text;
  std::string listed = ::testing::TempDir() + "/listed.txt";
  std::string cmd = "unshare -n sh -c 'nft -f " + path + " && nft -f " + open + " && nft -f " + again + " && nft -f " + slot +
                    " && nft list set inet " + plan->table + " dyn_" + std::to_string(plan->templates[1].index) +
                    " | tr -d \" \\n\\t\" > " + listed + " && grep -q 198.51.100.22.443-500 " + listed + " && grep -q \"198.51.100.20.443[,}]\" " + listed +
                    " && ! grep -q 1-65535 " + listed + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << NftRuleset(*plan);
}

}  // namespace
}  // namespace sandpool
