#include "scheduler/net/dyn_addresses.h"

#include <gtest/gtest.h>

namespace sandpool {
namespace {

constexpr uint32_t kA = 0xc6336407;
constexpr int64_t kS = 1000000;
const std::vector<PortRange> kAll{{1, 65535}};

TEST(DynAddresses, ANewAddressIsAddedOnItsPorts) {
  DynAddresses d;
  auto c = d.Grant("dyn_0", kA, {{443, 443}});
  EXPECT_EQ(c, (std::vector<DynChange>{{"dyn_0", kA, {}, {{443, 443}}}}));
  d.Apply("dyn_0", kA, {{443, 443}}, 10 * kS, c);
  // The same again, longer: nothing changes in the set (the daemon expires it, not the kernel).
  EXPECT_TRUE(d.Grant("dyn_0", kA, {{443, 443}}).empty());
}

TEST(DynAddresses, WiderPortsOfAnotherNameReplaceTheElementsInsteadOfOverlappingThem) {
  DynAddresses d;
  d.Apply("dyn_0", kA, {{443, 443}}, 10 * kS, d.Grant("dyn_0", kA, {{443, 443}}));
  // Every port, until later: the old element goes, the merged one comes (an interval set
  // refuses an element overlapping another).
  auto c = d.Grant("dyn_0", kA, {});
  EXPECT_EQ(c, (std::vector<DynChange>{{"dyn_0", kA, {{443, 443}}, kAll}}));
  d.Apply("dyn_0", kA, {}, 20 * kS, c);
  // Ports 80 and 444-500 besides 443: merged into disjoint ranges.
  DynAddresses e;
  e.Apply("dyn_0", kA, {{443, 443}}, 10 * kS, e.Grant("dyn_0", kA, {{443, 443}}));
  EXPECT_EQ(e.Grant("dyn_0", kA, {{80, 80}, {444, 500}}),
            (std::vector<DynChange>{{"dyn_0", kA, {{443, 443}}, {{80, 80}, {443, 500}}}}));
}

TEST(DynAddresses, EachGrantExpiresOnItsOwn) {
  DynAddresses d;
  d.Apply("dyn_0", kA, {{443, 443}}, 30 * kS, d.Grant("dyn_0", kA, {{443, 443}}));
  d.Apply("dyn_0", kA, {}, 10 * kS, d.Grant("dyn_0", kA, {}));
  EXPECT_TRUE(d.Expired(5 * kS).empty());
  // The wide grant is over at 10 s: back to 443 alone.
  auto c = d.Expired(10 * kS);
  EXPECT_EQ(c, (std::vector<DynChange>{{"dyn_0", kA, kAll, {{443, 443}}}}));
  d.CommitExpired(10 * kS, c);
  EXPECT_TRUE(d.Expired(11 * kS).empty());
  c = d.Expired(30 * kS);
  EXPECT_EQ(c, (std::vector<DynChange>{{"dyn_0", kA, {{443, 443}}, {}}}));
  d.CommitExpired(30 * kS, c);
  EXPECT_EQ(d.size(), 0u);
}

TEST(DynAddresses, AChangeNotAppliedIsNotRemembered) {
  DynAddresses d;
  (void)d.Grant("dyn_0", kA, {{443, 443}});  // its transaction failed: no Apply
  EXPECT_EQ(d.Grant("dyn_0", kA, {{443, 443}}), (std::vector<DynChange>{{"dyn_0", kA, {}, {{443, 443}}}}));
  EXPECT_EQ(d.size(), 0u);
}

TEST(DynAddresses, SetsAreSeparateAndAFlushedOneIsForgotten) {
  DynAddresses d;
  d.Apply("jdyn_3", kA, {{443, 443}}, 10 * kS, d.Grant("jdyn_3", kA, {{443, 443}}));
  EXPECT_EQ(d.Grant("dyn_0", kA, {{443, 443}}).size(), 1u);
  d.Forget("jdyn_3");
  EXPECT_EQ(d.size(), 0u);
  EXPECT_EQ(d.Grant("jdyn_3", kA, {{443, 443}}).size(), 1u);
}

}  // namespace
}  // namespace sandpool
