// Session's life hooks, with the test as its keeper and agent: the far ends of socket pairs that
// speak the real channel framing (worker/channel.h) and the real session messages. What is
// checked is the contract in session.h: exactly one of on_ready and on_start_failed runs, an end
// before Ready is a failed start (never on_ended, which made Sessions resume a sandbox that never
// started, without end), and destroying a Session runs no life hook.
#include "scheduler/sessions/session.h"

#include <event2/event.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include "scheduler/jobs/tests/channel_peer.h"
#include "scheduler/redis/tests/loop_redis_test.h"
#include "worker/ipc/wire.h"

namespace sandpool {
namespace {

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override { base_ = event_base_new(); }
  void TearDown() override {
    session_.reset();
    event_base_free(base_);
  }

  static std::pair<UniqueFd, UniqueFd> Pair() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    return {UniqueFd(sv[0]), UniqueFd(sv[1])};
  }

  // The keeper's next frame, running the loop until it is there.
  Frame FromSession() {
    EXPECT_TRUE(RunLoopUntil(base_, [this] { return keeper_.Poll(); }));
    return keeper_.frames.empty() ? Frame{} : keeper_.Take();
  }
  // Starts a Session whose keeper is the test's `keeper_` channel; the test reads its Start.
  void Start() {
    Session::Hooks hooks;
    hooks.on_ready = [this](Session&) { ++ready_; };
    hooks.on_start_failed = [this](Session&, const std::string& why) { failed_.push_back(why); };
    hooks.on_ended = [this](Session&, const std::string& why, bool) { ended_.push_back(why); };
    hooks.publish = [](const std::string&, std::string) {};
    hooks.op_channel = [](std::string_view id) { return std::string(id); };
    hooks.process_channel = [](std::string_view pid) { return std::string(pid); };
    session_ = std::make_unique<Session>(base_, "s1", "host", std::vector<std::pair<std::string, std::string>>{},
                                         std::vector<std::string>{}, hooks);
    auto [ours, peer] = ChannelPeer::Make();
    keeper_ = std::move(peer);
    auto [disk, unused] = Pair();  // any fd stands for the disk: it is only passed on
    SessionHost::KeeperHandle k;
    k.slot = 3;
    k.channel = std::move(ours);
    SessionStartMsg start;
    start.session = "s1";
    start.fresh = true;
    session_->Start(std::move(k), std::move(disk), start);
    Frame frame = FromSession();
    EXPECT_EQ(frame.type, static_cast<uint16_t>(SessionMsg::kStart));
    EXPECT_EQ(frame.fds.size(), 1u) << "the disk travels with Start";
  }
  // The keeper says Ready and hands over the agent's socket; the test keeps its far end.
  void Ready() {
    auto [ours, theirs] = Pair();
    agent_ = std::move(theirs);
    ASSERT_TRUE(keeper_.Send(static_cast<uint16_t>(SessionMsg::kReady), "", {ours.get()}).ok());
    ASSERT_TRUE(RunLoopUntil(base_, [this] { return ready_ > 0; }));
  }

  struct event_base* base_ = nullptr;
  std::unique_ptr<Session> session_;
  ChannelPeer keeper_;
  UniqueFd agent_;
  int ready_ = 0;
  std::vector<std::string> failed_, ended_;
};

TEST_F(SessionTest, AKeeperThatDiesBeforeReadyIsAFailedStartNotAnEnd) {
  Start();
  keeper_.ch.Close();
  ASSERT_TRUE(RunLoopUntil(base_, [this] { return !failed_.empty() || !ended_.empty(); }));
  ASSERT_EQ(failed_.size(), 1u);
  EXPECT_NE(failed_[0].find("keeper died"), std::string::npos) << failed_[0];
  EXPECT_TRUE(ended_.empty());
  EXPECT_EQ(ready_, 0);
  EXPECT_TRUE(session_->ended());
}

TEST_F(SessionTest, AKeeperThatReportsFailureIsAFailedStart) {
  Start();
  SessionFailedMsg m;
  m.message = "mount: no such device";
  ASSERT_TRUE(keeper_.Send(static_cast<uint16_t>(SessionMsg::kFailed), EncodeMsg(m)).ok());
  ASSERT_TRUE(RunLoopUntil(base_, [this] { return !failed_.empty(); }));
  EXPECT_EQ(failed_, std::vector<std::string>{"mount: no such device"});
  EXPECT_TRUE(ended_.empty());
}

TEST_F(SessionTest, AfterReadyTheAgentsEndIsAnEndWithItsReason) {
  Start();
  Ready();
  agent_.reset();  // init (the agent) is gone: the session asks its keeper to end the sandbox
  Frame stop = FromSession();
  EXPECT_EQ(stop.type, static_cast<uint16_t>(SessionMsg::kStop));
  ASSERT_TRUE(keeper_.Send(static_cast<uint16_t>(SessionMsg::kEnded), EncodeMsg(SessionEndedMsg{})).ok());
  ASSERT_TRUE(RunLoopUntil(base_, [this] { return !ended_.empty(); }));
  EXPECT_EQ(ended_.size(), 1u);
  EXPECT_NE(ended_[0].find("agent"), std::string::npos) << ended_[0];
  EXPECT_TRUE(failed_.empty());
  EXPECT_EQ(ready_, 1);
}

TEST_F(SessionTest, DestroyingASessionRunsNoLifeHook) {
  Start();
  session_.reset();  // the owner lets go of it while it is being made
  Start();
  Ready();
  session_.reset();  // and of a running one
  event_base_loop(base_, EVLOOP_NONBLOCK);
  EXPECT_TRUE(failed_.empty());
  EXPECT_TRUE(ended_.empty());
}

}  // namespace
}  // namespace sandpool
