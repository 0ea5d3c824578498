// A test base for code that runs on the daemon's libevent loop and talks to Redis: a private
// redis-server (tests/support/redis_server.h), a blocking connection to look at it (sync_), a
// loop (base_) with the daemon's kind of connection on it (cmd_: scripts preloaded, named
// `client_name_`), and RunUntil. Skips when no redis-server was found. Header-only; for the
// tests of scheduler/ folders (redis and those above it).
#pragma once

#include <event2/event.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "common/clock.h"
#include "scheduler/redis/redis_async.h"
#include "scheduler/redis/scripts.h"
#include "tests/support/redis_server.h"

namespace sandpool {

// Runs `base` until `done` holds, waking at least every millisecond; false after 10 s.
inline bool RunLoopUntil(struct event_base* base, const std::function<bool()>& done) {
  int64_t deadline = MonotonicUs() + 10'000'000;
  while (!done()) {
    if (MonotonicUs() > deadline) return false;
    event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    struct timeval tv = {0, 1000};
    event_base_loopexit(base, &tv);
    event_base_loop(base, EVLOOP_ONCE);
  }
  return true;
}

class LoopRedisTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!server_.Start()) GTEST_SKIP() << "redis-server not available";
    sync_ = MustConnect(server_.UnixUrl());
    ASSERT_NE(sync_, nullptr);
    base_ = event_base_new();
    RedisAsync::Hooks hooks;
    hooks.on_connect = [this] { ++connects_; };
    cmd_ = std::make_unique<RedisAsync>(base_, server_.UnixUrl(), "test", hooks, client_name_);
    cmd_->PreloadScripts(AllScripts());  // as the daemon does: no NOSCRIPT round trips
    cmd_->Connect();
    ASSERT_TRUE(RunUntil([this] { return connects_ > 0; }));
  }
  // Subclasses reset what uses cmd_ first, then call this.
  void TearDown() override {
    cmd_.reset();
    if (base_) event_base_free(base_);
    base_ = nullptr;
  }

  bool RunUntil(const std::function<bool()>& done) { return RunLoopUntil(base_, done); }
  // A command on the blocking connection that must succeed.
  ReplyPtr Must(const std::vector<std::string>& args) {
    auto r = sync_->Command(args);
    EXPECT_TRUE(r.ok()) << r.status().message() << " (" << args[0] << ")";
    return r.ok() ? std::move(*r) : nullptr;
  }

  std::string client_name_;  // set in a subclass's constructor to name cmd_
  TestRedisServer server_;
  std::unique_ptr<SyncRedis> sync_;
  struct event_base* base_ = nullptr;
  int connects_ = 0;
  std::unique_ptr<RedisAsync> cmd_;
};

}  // namespace sandpool
