// The Daemon through its seams: a real redis-server, and the spawner the Daemon is given (its
// transport: the far end of a socket pair) played by the test, which also plays every keeper it
// "starts" (worker/ipc/messages.h, the real framing, stdio pipes passed as fds). One job goes the
// whole way a job goes, queue entry to stored result, without sandboxes; then a drain ends the
// loop. The sandboxes themselves are the integration tests' (tests/integration).
#include "scheduler/daemon/daemon.h"

#include <event2/event.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <msgpack.hpp>

#include <filesystem>

#include "queue/protocol.h"
#include "scheduler/jobs/tests/channel_peer.h"
#include "scheduler/redis/tests/loop_redis_test.h"
#include "worker/ipc/messages.h"

namespace sandpool {
namespace {

namespace fs = std::filesystem;

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!server_.Start()) GTEST_SKIP() << "redis-server not available";
    sync_ = MustConnect(server_.UnixUrl());
    ASSERT_NE(sync_, nullptr);
    std::string tmpl = fs::temp_directory_path().string() + "/sp_daemon_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    ASSERT_EQ(::mkdir((dir_ + "/sessions").c_str(), 0700), 0);
    base_ = event_base_new();
    config_.redis = server_.UnixUrl();
    config_.consumer = "d1";
    config_.metrics_addr = "off";
    config_.state_dir = dir_;
    config_.session_spares = 0;
    config_.max_sandboxes = 4;
    config_.memory_budget_bytes = 64ull << 30;
    TemplateConfig t;
    t.name = "default";
    t.min_workers = 1;
    t.max_workers = 1;
    config_.templates.push_back(t);
    auto [theirs, ours] = ChannelPeer::Make();
    spawner_ = std::move(ours);
    SpawnerHandle handle;
    handle.pid = -1;  // no process: nothing is signalled
    handle.channel = std::move(theirs);
    daemon_ = std::make_unique<Daemon>(config_, base_, std::move(handle), CgroupLayout{});
    Status s = daemon_->Start();
    ASSERT_TRUE(s.ok()) << s.message();
  }
  void TearDown() override {
    daemon_.reset();  // not Stop(): it reaps every child of the process (the test's redis-server too)
    if (base_) event_base_free(base_);
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  bool RunUntil(const std::function<bool()>& done) { return RunLoopUntil(base_, done); }
  Frame Next(ChannelPeer& in) {
    EXPECT_TRUE(RunUntil([&] { return in.Poll(); }));
    return in.frames.empty() ? Frame{} : in.Take();
  }
  TestRedisServer server_;
  std::unique_ptr<SyncRedis> sync_;
  std::string dir_;
  struct event_base* base_ = nullptr;
  DaemonConfig config_;
  ChannelPeer spawner_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(DaemonTest, AJobGoesFromItsQueueEntryThroughAKeeperToItsStoredResult) {
  Frame spawn = Next(spawner_);
  ASSERT_EQ(spawn.type, static_cast<uint16_t>(MsgType::kSpawnKeeper));
  SpawnKeeperMsg want;
  ASSERT_TRUE(Decode(spawn.payload, &want).ok());
  ChannelPeer keeper = KeeperStarted(spawner_, want.slot);
  // A prepared sandbox: the slot gets its stdio pipes.
  int in[2], out[2], err[2];
  ASSERT_EQ(pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(err, O_CLOEXEC), 0);
  ASSERT_TRUE(
      keeper.Send(static_cast<uint16_t>(MsgType::kReady), Encode(ReadyMsg{1, 10}), {in[1], out[0], err[0]}).ok());
  for (int fd : {in[0], in[1], out[0], err[0]}) ::close(fd);

  msgpack::sbuffer job;
  msgpack::packer<msgpack::sbuffer> pk(job);
  pk.pack_map(3);
  pk.pack(std::string("v")), pk.pack(1);
  pk.pack(std::string("id")), pk.pack(std::string("j1"));
  pk.pack(std::string("argv")), pk.pack(std::vector<std::string>{"echo", "hi"});
  ASSERT_TRUE(sync_->Command({"XADD", "sandpool:q:default", "*", "id", "j1", "job", std::string(job.data(), job.size())}).ok());

  Frame run = Next(keeper);
  ASSERT_EQ(run.type, static_cast<uint16_t>(MsgType::kRun));
  RunMsg m;
  ASSERT_TRUE(Decode(run.payload, &m).ok());
  EXPECT_EQ(m.generation, 1u);
  EXPECT_EQ(m.argv, (std::vector<std::string>{"echo", "hi"}));
  ASSERT_TRUE(keeper.Send(static_cast<uint16_t>(MsgType::kStarted), Encode(GenerationMsg{1})).ok());
  ASSERT_EQ(::write(out[1], "hi\n", 3), 3);
  ::close(out[1]);
  ::close(err[1]);
  ExitedMsg x;
  x.generation = 1;
  x.have_status = true;
  x.started = true;
  x.wait_status = 0;  // exited 0
  ASSERT_TRUE(keeper.Send(static_cast<uint16_t>(MsgType::kExited), Encode(x)).ok());

  std::optional<JobResult> result;
  ASSERT_TRUE(RunUntil([&] {
    auto r = sync_->Command({"GET", "sandpool:result:j1"});
    if (r.ok() && (*r)->type == REDIS_REPLY_STRING) result = DecodeResult(std::string_view((*r)->str, (*r)->len));
    return result.has_value();
  }));
  EXPECT_EQ(result->outcome, Outcome::kExit);
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_EQ(result->stdout_data, "hi\n");
  EXPECT_EQ(result->worker, "d1");
  auto pending = sync_->Command({"XPENDING", "sandpool:q:default", "workers"});
  ASSERT_TRUE(pending.ok());
  EXPECT_EQ((*pending)->element[0]->integer, 0) << "the entry is acknowledged with its result";

  daemon_->Drain("test");  // nothing runs: the loop ends
  EXPECT_EQ(event_base_dispatch(base_), 0);
  EXPECT_EQ(daemon_->exit_code(), 0);
}

}  // namespace
}  // namespace sandpool
