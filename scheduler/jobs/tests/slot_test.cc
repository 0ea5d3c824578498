// Slot with its real transport: the test plays the keeper on the other end of a socketpair
// (worker/ipc/channel.h frames, the stdio pipes passed as fds, as a keeper does) while a real
// libevent loop drives the Slot. What a job's owner relies on, without a sandbox or Redis.
#include "scheduler/jobs/slot.h"

#include <event2/event.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "scheduler/redis/tests/loop_redis_test.h"  // RunLoopUntil
#include "worker/ipc/channel.h"
#include "worker/ipc/messages.h"

namespace sandpool {
namespace {

struct Pipe {
  UniqueFd r, w;
  Pipe() {
    int p[2];
    EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
    r.reset(p[0]);
    w.reset(p[1]);
  }
};

class SlotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = event_base_new();
    SlotHooks hooks;
    hooks.on_ready = [this](Slot&) { ++ready_; };
    hooks.on_started = [this](Slot&) { ++started_; };
    hooks.on_output = [this](Slot&, std::string_view, std::string_view data) { live_ += data; };
    hooks.on_finished = [this](Slot&, const SlotJob& j, JobResult&& r) {
      finished_job_ = j.spec.id;
      result_ = std::move(r);
    };
    hooks.on_keeper_lost = [this](Slot&) { ++keeper_lost_; };
    slot_ = std::make_unique<Slot>(base_, 0, 0, "sh", std::vector<std::string>{"TEMPLATE=1"}, hooks);
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    keeper_ = Channel(UniqueFd(sv[1]));
    slot_->AttachKeeper(UniqueFd(sv[0]), -1, UniqueFd());
  }
  void TearDown() override {
    slot_.reset();
    event_base_free(base_);
  }

  bool RunUntil(const std::function<bool()>& done) { return RunLoopUntil(base_, done); }
  // The next frame the slot sent to its keeper (the loop runs until it is there).
  Frame FromSlot() {
    EXPECT_TRUE(RunUntil([&] {
      struct pollfd p = {keeper_.fd(), POLLIN, 0};
      return poll(&p, 1, 0) == 1;
    }));
    auto f = keeper_.Receive();
    EXPECT_TRUE(f.ok()) << f.status().message();
    return f.ok() ? std::move(f).value() : Frame{};
  }
  // A prepared sandbox of `generation`: its stdio pipes go to the slot, as a keeper's Ready.
  void Ready(uint64_t generation) {
    in_ = Pipe();
    out_ = Pipe();
    err_ = Pipe();
    ASSERT_TRUE(keeper_.Send(static_cast<uint16_t>(MsgType::kReady), Encode(ReadyMsg{generation, 10}),
                             {in_.w.get(), out_.r.get(), err_.r.get()})
                    .ok());
    in_.w.reset();
    out_.r.reset();
    err_.r.reset();
  }
  void Exited(uint64_t generation, bool started, int wait_status) {
    ExitedMsg x;
    x.generation = generation;
    x.have_status = started;
    x.started = started;
    x.wait_status = wait_status;
    ASSERT_TRUE(keeper_.Send(static_cast<uint16_t>(MsgType::kExited), Encode(x)).ok());
  }
  SlotJob Job(const std::string& id) {
    SlotJob j;
    j.spec.id = id;
    j.spec.argv = {"echo", "hi"};
    j.spec.env = {{"A", "1"}};
    j.spec.timeout_ms = 10000;  // as validated: defaulted and clamped (protocol.h)
    j.spec.max_output_bytes = 1 << 20;
    j.attempt = 2;
    return j;
  }

  struct event_base* base_ = nullptr;
  std::unique_ptr<Slot> slot_;
  Channel keeper_;
  Pipe in_, out_, err_;
  int ready_ = 0, started_ = 0, keeper_lost_ = 0;
  std::string live_, finished_job_;
  std::optional<JobResult> result_;
};

TEST_F(SlotTest, AJobRunsInTheReadySandboxAndEndsWithItsOutputAndStatus) {
  Ready(1);
  ASSERT_TRUE(RunUntil([&] { return slot_->ready(); }));
  EXPECT_EQ(ready_, 1);
  slot_->Reserve();
  slot_->Start(Job("j1"));
  Frame run = FromSlot();
  ASSERT_EQ(run.type, static_cast<uint16_t>(MsgType::kRun));
  RunMsg m;
  ASSERT_TRUE(Decode(run.payload, &m).ok());
  EXPECT_EQ(m.generation, 1u);
  EXPECT_EQ(m.argv, (std::vector<std::string>{"echo", "hi"}));
  EXPECT_NE(std::find(m.env.begin(), m.env.end(), "TEMPLATE=1"), m.env.end()) << "the template's environment";
  ASSERT_TRUE(keeper_.Send(static_cast<uint16_t>(MsgType::kStarted), Encode(GenerationMsg{1})).ok());
  ASSERT_EQ(write(out_.w.get(), "hi\n", 3), 3);
  ASSERT_EQ(write(err_.w.get(), "warn", 4), 4);
  out_.w.reset();
  err_.w.reset();
  Exited(1, true, 3 << 8);  // exit code 3
  ASSERT_TRUE(RunUntil([&] { return result_.has_value(); }));
  EXPECT_EQ(finished_job_, "j1");
  EXPECT_EQ(started_, 1);
  EXPECT_EQ(result_->outcome, Outcome::kExit);
  EXPECT_EQ(result_->exit_code, 3);
  EXPECT_EQ(result_->stdout_data, "hi\n");
  EXPECT_EQ(result_->stderr_data, "warn");
  EXPECT_EQ(result_->attempt, 2u);
  EXPECT_EQ(live_, "hi\nwarn");
  EXPECT_FALSE(slot_->busy());
}

TEST_F(SlotTest, ASandboxThatDiesBeforeTheJobStartsCostsTheJobNothing) {
  Ready(1);
  ASSERT_TRUE(RunUntil([&] { return slot_->ready(); }));
  slot_->Reserve();
  slot_->Start(Job("j2"));
  ASSERT_EQ(FromSlot().type, static_cast<uint16_t>(MsgType::kRun));
  Exited(1, false, 0);  // gone before the exec: the job waits for the next sandbox
  out_.w.reset();
  err_.w.reset();
  Ready(2);
  Frame run = FromSlot();
  ASSERT_EQ(run.type, static_cast<uint16_t>(MsgType::kRun));
  RunMsg m;
  ASSERT_TRUE(Decode(run.payload, &m).ok());
  EXPECT_EQ(m.generation, 2u);
  EXPECT_FALSE(result_.has_value());
  ASSERT_TRUE(keeper_.Send(static_cast<uint16_t>(MsgType::kStarted), Encode(GenerationMsg{2})).ok());
  out_.w.reset();
  err_.w.reset();
  Exited(2, true, 0);
  ASSERT_TRUE(RunUntil([&] { return result_.has_value(); }));
  EXPECT_EQ(result_->outcome, Outcome::kExit);
  EXPECT_EQ(result_->exit_code, 0);
}

TEST_F(SlotTest, FramesOfAnOlderSandboxAreIgnoredAndALostKeeperIsReported) {
  Ready(5);
  ASSERT_TRUE(RunUntil([&] { return slot_->ready(); }));
  Exited(4, true, 0);  // another generation's: not this sandbox's end
  for (int i = 0; i < 20; ++i) event_base_loop(base_, EVLOOP_ONCE | EVLOOP_NONBLOCK);
  EXPECT_TRUE(slot_->ready());
  keeper_.Close();
  ASSERT_TRUE(RunUntil([&] { return keeper_lost_ == 1; }));
  EXPECT_FALSE(slot_->ready());
  EXPECT_FALSE(slot_->has_keeper());
}

}  // namespace
}  // namespace sandpool
