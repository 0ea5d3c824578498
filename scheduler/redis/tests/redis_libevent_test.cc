// The daemon's hiredis adapter (redis_libevent.h) writes a command from an offset into hiredis's
// output buffer: commands of many MiB, small ones between them and ones added while a large one is
// still being written all reach Redis whole and in order, and their replies come back in order.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "scheduler/redis/tests/loop_redis_test.h"

namespace sandpool {
namespace {

std::string Pattern(size_t bytes, char seed) {
  std::string s(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) s[i] = static_cast<char>(seed + (i * 7919) % 251);
  return s;
}

class RedisLibevent : public LoopRedisTest {};

TEST_F(RedisLibevent, LargeAndSmallCommandsArriveWholeAndInOrder) {
  const std::string big1 = Pattern(24u << 20, 1), big2 = Pattern(9u << 20, 2), big3 = Pattern(3u << 20, 3);
  std::vector<std::string> order;
  auto note = [&order](const std::string& what) {
    return [&order, what](redisReply* r) {
      order.push_back(r != nullptr && r->type != REDIS_REPLY_ERROR ? what : what + ":failed");
    };
  };
  // Queued back to back before the loop runs: one output buffer of about 33 MiB.
  cmd_->Command({"SET", "a", "1"}, [&](redisReply* r) {
    note("a")(r);
    // Added while the 24 MiB command is still being written (the buffer holds a written prefix).
    cmd_->Command({"SET", "big3", big3}, note("big3"));
    cmd_->Command({"INCR", "n"}, note("n"));
  });
  cmd_->Command({"SET", "big1", big1}, note("big1"));
  cmd_->Command({"SET", "b", "2"}, note("b"));
  cmd_->Command({"SET", "big2", big2}, note("big2"));
  ASSERT_TRUE(RunUntil([&] { return order.size() == 6; }));
  EXPECT_EQ(order, (std::vector<std::string>{"a", "big1", "b", "big2", "big3", "n"}));
  for (const auto& [key, want] : {std::pair<std::string, const std::string*>{"big1", &big1}, {"big2", &big2},
                                  {"big3", &big3}}) {
    auto got = Must({"GET", key});
    ASSERT_TRUE(got && got->type == REDIS_REPLY_STRING) << key;
    EXPECT_TRUE(std::string(got->str, got->len) == *want) << key << " arrived altered";
  }
  EXPECT_EQ(Must({"GET", "n"})->str, std::string("1"));

  // A large reply comes back whole too, and the connection keeps serving small commands.
  std::string echoed;
  cmd_->Command({"GET", "big1"}, [&](redisReply* r) {
    if (r != nullptr && r->type == REDIS_REPLY_STRING) echoed.assign(r->str, r->len);
    order.push_back("get");
  });
  cmd_->Command({"PING"}, note("ping"));
  ASSERT_TRUE(RunUntil([&] { return order.size() == 8; }));
  EXPECT_TRUE(echoed == big1);
  EXPECT_EQ(order.back(), "ping");
}

}  // namespace
}  // namespace sandpool
