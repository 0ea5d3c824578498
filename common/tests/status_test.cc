#include "common/status.h"

#include <gtest/gtest.h>

#include "common/log.h"

namespace sandpool {
namespace {

Status Fails() { return ErrnoStatus("open /nope", ENOENT); }
Status Chain() {
  SP_RETURN_IF_ERROR(Fails());
  return Status::Ok();
}

TEST(Status, ErrnoKeepsContextAndCode) {
  Status s = Chain();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.sys_errno(), ENOENT);
  EXPECT_NE(s.message().find("open /nope: "), std::string::npos);
  EXPECT_EQ(s.Prefixed("load").message().rfind("load: open /nope", 0), 0u);
}

TEST(Result, HoldsValueOrError) {
  Result<int> good(5);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 5);
  EXPECT_TRUE(good.status().ok());
  Result<int> bad(Status::Error("nope"));
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "nope");
}

TEST(Log, JsonEscapesControlAndInvalidUtf8) {
  std::string out;
  AppendJsonString(out, std::string_view("a\"b\n\x01\xff\xc3\xa9", 8));
  EXPECT_EQ(out, "\"a\\\"b\\n\\u0001\\u00ff\xc3\xa9\"");
}

}  // namespace
}  // namespace sandpool
