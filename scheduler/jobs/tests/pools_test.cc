// Pools with its real transport: the test plays the spawner on the other end of a socket pair
// (worker/ipc/messages.h, the keepers' channel ends passed as fds, as the spawner does) and the
// keepers it "starts", while a real libevent loop drives Pools. What the daemon relies on, without
// a spawner process or sandboxes: each template's minimum of keepers is asked for at Start, a
// keeper that dies is asked for again, session keepers and disks come back to who asked, and when
// the spawner goes, whoever waits hears that nothing is coming.
#include "scheduler/jobs/pools.h"

#include <event2/event.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "scheduler/jobs/tests/channel_peer.h"
#include "scheduler/redis/tests/loop_redis_test.h"  // RunLoopUntil
#include "worker/ipc/messages.h"

namespace sandpool {
namespace {

class PoolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = event_base_new();
    TemplateConfig t;
    t.name = "default";
    t.min_workers = 2;
    t.max_workers = 4;
    config_.templates.push_back(t);
    config_.max_sandboxes = 8;
    config_.memory_budget_bytes = 64ull << 30;
    pools_ = std::make_unique<Pools>(base_, config_, &metrics_);
    auto [theirs, ours] = ChannelPeer::Make();
    spawner_ = std::move(ours);
    SlotHooks hooks;
    hooks.on_ready = [this](Slot&) { ++ready_; };
    Status s = pools_->Start(std::move(theirs), hooks, [this](const Status&) { ++spawner_lost_; });
    ASSERT_TRUE(s.ok()) << s.message();
  }
  void TearDown() override {
    pools_.reset();
    event_base_free(base_);
  }

  bool RunUntil(const std::function<bool()>& done) { return RunLoopUntil(base_, done); }
  // The next request Pools sent to the spawner.
  Frame FromPools() {
    EXPECT_TRUE(RunUntil([&] { return spawner_.Poll(); }));
    return spawner_.frames.empty() ? Frame{} : spawner_.Take();
  }
  SpawnKeeperMsg SpawnRequest() {
    Frame f = FromPools();
    EXPECT_EQ(f.type, static_cast<uint16_t>(MsgType::kSpawnKeeper));
    SpawnKeeperMsg m;
    EXPECT_TRUE(Decode(f.payload, &m).ok());
    return m;
  }
  // The spawner's answer: keeper `slot` started; the test plays it.
  ChannelPeer Started(uint32_t slot) { return KeeperStarted(spawner_, slot); }
  // A keeper's Ready: a prepared sandbox's stdio pipes go to its slot.
  static void Ready(ChannelPeer& keeper) {
    int in[2], out[2], err[2];
    ASSERT_EQ(pipe2(in, O_CLOEXEC), 0);
    ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
    ASSERT_EQ(pipe2(err, O_CLOEXEC), 0);
    ASSERT_TRUE(keeper.Send(static_cast<uint16_t>(MsgType::kReady), Encode(ReadyMsg{1, 10}), {in[1], out[0], err[0]}).ok());
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) ::close(fd);
  }

  struct event_base* base_ = nullptr;
  DaemonConfig config_;
  Metrics metrics_;
  std::unique_ptr<Pools> pools_;
  ChannelPeer spawner_;
  int ready_ = 0, spawner_lost_ = 0;
};

TEST_F(PoolsTest, StartAsksForTheMinimumAndAKeeperThatDiesIsAskedForAgain) {
  SpawnKeeperMsg a = SpawnRequest(), b = SpawnRequest();
  EXPECT_EQ(a.template_index, 0u);
  EXPECT_FALSE(a.session);
  EXPECT_NE(a.slot, b.slot) << "a slot number is one sandbox's";
  EXPECT_EQ(pools_->PoolSize(0), 2u);
  ChannelPeer ka = Started(a.slot), kb = Started(b.slot);
  Ready(ka);
  Ready(kb);
  ASSERT_TRUE(RunUntil([&] { return pools_->ReadyCount(0) == 2; }));
  EXPECT_EQ(ready_, 2);
  EXPECT_NE(pools_->ReadySlot(0), nullptr);

  ka.ch.Close();  // keeper a died: its slot is no longer ready, and a keeper is asked for it again
  SpawnKeeperMsg again = SpawnRequest();
  EXPECT_EQ(again.slot, a.slot);
  EXPECT_EQ(pools_->ReadyCount(0), 1u);
  ChannelPeer ka2 = Started(again.slot);
  Ready(ka2);
  ASSERT_TRUE(RunUntil([&] { return pools_->ReadyCount(0) == 2; }));
}

TEST_F(PoolsTest, SessionKeepersAndDisksComeBackToWhoAskedAndTheBudgetIsShared) {
  SpawnRequest();
  SpawnRequest();  // the pool's two
  std::optional<SessionHost::KeeperHandle> got;
  pools_->SpawnSessionKeeper(0, [&](SessionHost::KeeperHandle k) { got = std::move(k); });
  SpawnKeeperMsg m = SpawnRequest();
  EXPECT_TRUE(m.session);
  EXPECT_GE(m.slot, pools_->SessionSlotBase()) << "session keepers never take a pool slot's uids";
  ChannelPeer keeper = Started(m.slot);
  ASSERT_TRUE(RunUntil([&] { return got.has_value(); }));
  EXPECT_EQ(got->slot, m.slot);
  EXPECT_EQ(got->pid, 4242);
  EXPECT_TRUE(got->channel.valid());

  std::optional<std::string> made;
  pools_->MakeDisk("/state/s-1/disk.img", 1 << 30, "", [&](std::string error, uint64_t) { made = error; });
  Frame f = FromPools();
  ASSERT_EQ(f.type, static_cast<uint16_t>(MsgType::kMakeDisk));
  MakeDiskMsg disk;
  ASSERT_TRUE(Decode(f.payload, &disk).ok());
  EXPECT_EQ(disk.path, "/state/s-1/disk.img");
  EXPECT_EQ(disk.bytes, 1u << 30);
  ASSERT_TRUE(spawner_.Send(static_cast<uint16_t>(MsgType::kDiskMade), Encode(DiskMadeMsg{disk.request, "", 0})).ok());
  ASSERT_TRUE(RunUntil([&] { return made.has_value(); }));
  EXPECT_EQ(*made, "");

  // --max-sandboxes 8 with 2 pool slots: six sessions fit, the seventh does not.
  int taken = 0;
  while (pools_->TakeSessionBudget(256 << 20)) ++taken;
  EXPECT_EQ(taken, 6);
  EXPECT_FALSE(pools_->Grow(0, "test")) << "the sessions hold the rest of the host budget";
  pools_->ReturnSessionBudget(256 << 20);
  EXPECT_TRUE(pools_->Grow(0, "test"));
}

TEST_F(PoolsTest, WhenTheSpawnerGoesWhoeverWaitsHearsNothingIsComing) {
  SpawnRequest();
  SpawnRequest();
  std::optional<SessionHost::KeeperHandle> got;
  std::optional<std::string> made;
  pools_->SpawnSessionKeeper(0, [&](SessionHost::KeeperHandle k) { got = std::move(k); });
  pools_->MakeDisk("/state/s-2/disk.img", 1 << 30, "", [&](std::string error, uint64_t) { made = error; });
  spawner_.ch.Close();
  ASSERT_TRUE(RunUntil([&] { return got.has_value() && made.has_value(); }));
  EXPECT_FALSE(got->channel.valid());
  EXPECT_FALSE(made->empty());
  EXPECT_EQ(spawner_lost_, 1);
}

}  // namespace
}  // namespace sandpool
