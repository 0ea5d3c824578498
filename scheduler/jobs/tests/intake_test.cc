#include "scheduler/jobs/intake.h"

#include <gtest/gtest.h>

namespace sandpool {
namespace {

TEST(EntryIdBefore, OrdersAsRedisDoesByTimeThenSequenceNumerically) {
  EXPECT_TRUE(EntryIdBefore("1700000000000-0", "1700000000000-1"));
  EXPECT_TRUE(EntryIdBefore("1700000000000-9", "1700000000000-10"));  // not as strings
  EXPECT_TRUE(EntryIdBefore("999999999999-5", "1000000000000-0"));     // nor here
  EXPECT_FALSE(EntryIdBefore("1700000000000-1", "1700000000000-1"));
  EXPECT_FALSE(EntryIdBefore("1700000000001-0", "1700000000000-7"));
  EXPECT_TRUE(EntryIdBefore("5", "5-1"));  // an id without a sequence is its -0
}

TEST(EntryMs, IsTheIdsTime) { EXPECT_EQ(EntryMs("1700000000123-4"), 1700000000123); }

}  // namespace
}  // namespace sandpool
