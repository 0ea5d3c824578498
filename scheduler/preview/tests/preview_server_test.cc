#include "scheduler/preview/preview_server.h"

#include <gtest/gtest.h>

namespace sandpool {
namespace {

TEST(ConstantTimeEquals, EqualOnlyWhenEveryByteAndTheLengthMatch) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyz"));
  EXPECT_FALSE(ConstantTimeEquals("abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxy2"));  // last byte
  EXPECT_FALSE(ConstantTimeEquals("abcdefghijklmnopqrstuvwxyz", "bbcdefghijklmnopqrstuvwxyz"));  // first byte
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcd"));  // a prefix is not the token
  EXPECT_FALSE(ConstantTimeEquals("abcd", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("", "a"));
  EXPECT_FALSE(ConstantTimeEquals(std::string_view("a\0", 2), "a"));  // a NUL is a byte like any other
}

}  // namespace
}  // namespace sandpool
