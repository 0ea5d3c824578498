// LiveConsumers: which daemons of a prefix hold a connection, from CLIENT LIST's text.
#include "scheduler/redis/liveness.h"

#include <gtest/gtest.h>

namespace sandpool {
namespace {

TEST(LiveConsumers, NamesOfThePrefixLessTheirConnectionSuffix) {
  const std::string list =
      "id=3 addr=/tmp/r.sock:0 laddr=/tmp/r.sock:0 fd=8 name=sandpoold:sp:host-a:cmd age=4 idle=0\n"
      "id=4 addr=/tmp/r.sock:0 laddr=/tmp/r.sock:0 fd=9 name=sandpoold:sp:host-a:reader age=4\n"
      "id=5 addr=127.0.0.1:5 fd=10 name=sandpoold:sp:host:b:1234:sessions age=2\n"
      "id=6 addr=127.0.0.1:6 fd=11 name=sandpoold:other:host-c:cmd age=2\n"
      "id=7 addr=127.0.0.1:7 fd=12 name= age=2\n"
      "id=8 addr=127.0.0.1:8 fd=13 name=client age=1\n"
      "id=9 addr=127.0.0.1:9 fd=14 name=sandpoold:sp:host-d:cmd";  // last field of the text
  EXPECT_EQ(LiveConsumers(list, "sp"),
            (std::set<std::string>{"host-a", "host:b:1234", "host-d"}));
}

TEST(LiveConsumers, APrefixIsMatchedWholeNotAsTheStartOfALongerOne) {
  EXPECT_TRUE(LiveConsumers("id=1 name=sandpoold:spx:host-a:cmd age=1\n", "sp").empty());
  EXPECT_TRUE(LiveConsumers("id=1 name=sandpoold:sp:nosuffix age=1\n", "sp").empty());
  EXPECT_TRUE(LiveConsumers("", "sp").empty());
}

}  // namespace
}  // namespace sandpool
