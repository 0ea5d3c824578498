#include "clients/cli/output.h"

#include <gtest/gtest.h>
#include <msgpack.hpp>

namespace sandpool::cli {
namespace {

TEST(Output, ResultJson) {
  JobResult r;
  r.id = "j";
  r.outcome = Outcome::kExit;
  r.exit_code = 3;
  r.stdout_data = std::string("ok\n\xff", 4);
  r.stderr_data = "é";
  r.worker = "w";
  r.attempt = 1;
  std::string j = ResultToJson(r);
  EXPECT_EQ(j.front(), '{');
  EXPECT_EQ(j.back(), '}');
  EXPECT_NE(j.find(R"("id":"j","outcome":"exit","exit_code":3,"signal":null,)"), std::string::npos) << j;
  EXPECT_NE(j.find(R"("stdout":"ok\n\u00ff")"), std::string::npos) << j;
  EXPECT_NE(j.find("\"stderr\":\"é\""), std::string::npos) << j;
  EXPECT_NE(j.find(R"("error":null})"), std::string::npos) << j;

  r.error = JobError{ErrorCode::kSandboxFailed, "no \"room\""};
  j = ResultToJson(r);
  EXPECT_NE(j.find(R"("error":{"code":"sandbox_failed","message":"no \"room\"","retryable":true}})"),
            std::string::npos) << j;
}

TEST(Output, MsgpackToJson) {
  msgpack::sbuffer sb;
  msgpack::packer<msgpack::sbuffer> pk(&sb);
  pk.pack_map(4);
  pk.pack(std::string("slots"));
  pk.pack(8);
  pk.pack(std::string("name"));
  pk.pack(std::string("h\"1"));
  pk.pack(std::string("list"));
  pk.pack(std::vector<int>{1, -2});
  pk.pack(7);
  pk.pack_nil();
  auto j = MsgpackToJson(std::string_view(sb.data(), sb.size()));
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ(j.value(), R"({"slots":8,"name":"h\"1","list":[1,-2],"7":null})");
  EXPECT_FALSE(MsgpackToJson("\xc1").ok());
  EXPECT_FALSE(MsgpackToJson(std::string("\x01\x02", 2)).ok());
  EXPECT_FALSE(MsgpackToJson("").ok());
}

}  // namespace
}  // namespace sandpool::cli
