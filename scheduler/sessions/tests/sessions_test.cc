// Sessions through its seams: a real redis-server and the real operation streams, a host
// (session_host.h) whose keepers are the test (the far ends of socket pairs, the real framing
// and session messages) and whose disks are sparse files, and a clock the test moves. What the
// daemon's life cycle promises, without a spawner, sandboxes or waiting out a timeout:
//   - a create is answered once the keeper says Ready, and the record says `running`;
//   - a session idle past its idle timeout is stopped at the next heartbeat (the clock moved);
//   - a keeper that dies before Ready answers the create `sandbox_failed`, and no other keeper is
//     asked for it (it was once served again and resumed without end).
#include "scheduler/sessions/sessions.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <msgpack.hpp>

#include <deque>
#include <filesystem>

#include "scheduler/jobs/tests/channel_peer.h"
#include "scheduler/redis/tests/loop_redis_test.h"
#include "tests/support/manual_clock.h"
#include "worker/ipc/wire.h"

namespace sandpool {
namespace {

namespace fs = std::filesystem;

// Keepers and disks for Sessions, with the test on the keepers' side.
class TestHost final : public SessionHost {
 public:
  void SpawnSessionKeeper(uint32_t, std::function<void(KeeperHandle)> done) override {
    auto [theirs, peer] = ChannelPeer::Make();
    keepers.push_back(std::move(peer));
    KeeperHandle k;
    k.slot = next_slot++;
    k.channel = std::move(theirs);
    done(std::move(k));
  }
  void ReleaseSessionSlot(uint32_t) override { ++released; }
  size_t FreeSessionSlots() const override { return free_slots; }
  void MakeDisk(const std::string& path, uint64_t bytes, const std::string&, DiskDone done) override {
    UniqueFd f(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    done(f.valid() && ::ftruncate(f.get(), static_cast<off_t>(bytes)) == 0 ? "" : "cannot make " + path, 0);
  }
  bool SessionFits(uint64_t) const override { return true; }
  bool TakeSessionBudget(uint64_t) override {
    ++budget;
    return true;
  }
  void ReturnSessionBudget(uint64_t) override { --budget; }

  std::deque<ChannelPeer> keepers;  // the test's ends, in the order keepers were asked for
  uint32_t next_slot = 100;
  size_t free_slots = 100;
  int released = 0, budget = 0;
};

class SessionsTest : public LoopRedisTest {
 protected:
  SessionsTest() { client_name_ = "sandpool:d1:cmd"; }
  void SetUp() override {
    std::string tmpl = fs::temp_directory_path().string() + "/sp_sessions_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    LoopRedisTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    config_.consumer = "d1";
    config_.redis = server_.UnixUrl();
    config_.state_dir = dir_;
    config_.session_spares = 0;  // only the keepers a session asks for
    TemplateConfig t;
    t.name = "default";
    config_.templates.push_back(t);
    ASSERT_EQ(::mkdir((dir_ + "/sessions").c_str(), 0700), 0);
    ledger_ = std::make_unique<JobLedger>(base_, cmd_.get(), keys_, config_, &metrics_);
    sessions_ = std::make_unique<Sessions>(base_, config_, keys_, cmd_.get(), ledger_.get(), &host_, &metrics_,
                                           [] {}, clock_);
    Status s = sessions_->Start();
    ASSERT_TRUE(s.ok()) << s.message();
    sessions_->OnCommandConnected();
  }
  void TearDown() override {
    if (sessions_) sessions_->Close();
    // As the daemon's Stop: the connection goes first, so the replies it still owes (answered
    // with nothing as it closes) reach a ledger and sessions that still exist.
    if (cmd_) cmd_->Close();
    sessions_.reset();
    ledger_.reset();
    LoopRedisTest::TearDown();
    fs::remove_all(dir_);
  }

  // XADDs an operation request (PROTOCOL.md 13) to `stream`; `fields` are the op's own.
  void Send(const std::string& stream, const std::string& op_id, const std::string& op, const std::string& sid,
            const std::map<std::string, uint64_t>& fields = {}) {
    msgpack::sbuffer buf;
    msgpack::packer<msgpack::sbuffer> pk(buf);
    pk.pack_map(static_cast<uint32_t>(4 + fields.size()));
    pk.pack(std::string("v")), pk.pack(2);
    pk.pack(std::string("id")), pk.pack(op_id);
    pk.pack(std::string("op")), pk.pack(op);
    pk.pack(std::string("session")), pk.pack(sid);
    for (const auto& [k, v] : fields) pk.pack(k), pk.pack(v);
    Must({"XADD", stream, "*", "id", op_id, "req", std::string(buf.data(), buf.size())});
  }
  // The stored result of `op_id`, once there is one.
  std::optional<OpResult> Result(const std::string& op_id) {
    std::optional<OpResult> got;
    bool ok = RunUntil([&] {
      auto r = sync_->Command({"GET", keys_.Result(op_id)});
      if (!r.ok() || (*r)->type != REDIS_REPLY_STRING) return false;
      got = DecodeOpResult(std::string_view((*r)->str, (*r)->len));
      return true;
    });
    EXPECT_TRUE(ok) << "no result for " << op_id;
    return got;
  }
  std::string State(const std::string& sid) {
    auto r = sync_->Command({"HGET", keys_.Session(sid), "state"});
    return r.ok() && (*r)->type == REDIS_REPLY_STRING ? std::string((*r)->str, (*r)->len) : "";
  }
  // Keeper `n`'s next frame, running the loop until it is there.
  Frame FromKeeper(size_t n) {
    EXPECT_TRUE(RunUntil([&] { return host_.keepers.size() > n && host_.keepers[n].Poll(); }));
    if (host_.keepers.size() <= n || host_.keepers[n].frames.empty()) return {};
    return host_.keepers[n].Take();
  }
  // Keeper `n` says Ready, handing over an agent socket whose far end the test keeps.
  void Ready(size_t n) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    agents_.emplace_back(sv[1]);
    UniqueFd ours(sv[0]);
    ASSERT_TRUE(host_.keepers[n].Send(static_cast<uint16_t>(SessionMsg::kReady), "", {ours.get()}).ok());
  }

  std::string dir_;
  Keys keys_{"sandpool"};
  DaemonConfig config_;
  Metrics metrics_;
  ManualClock clock_;
  TestHost host_;
  std::unique_ptr<JobLedger> ledger_;
  std::unique_ptr<Sessions> sessions_;
  std::vector<UniqueFd> agents_;
  const std::string intake_ = "sandpool:sreq:default";
};

TEST_F(SessionsTest, ACreateIsAnsweredWhenItsSandboxIsReadyAndAnIdleOneIsStoppedAtTheNextHeartbeat) {
  Send(intake_, "op-create", "create", "s1", {{"idle_timeout_ms", 60000}});
  Frame start = FromKeeper(0);
  ASSERT_EQ(start.type, static_cast<uint16_t>(SessionMsg::kStart));
  SessionStartMsg m;
  ASSERT_TRUE(DecodeMsg(start.payload, &m).ok());
  EXPECT_EQ(m.session, "s1");
  EXPECT_TRUE(m.fresh) << "a new disk is laid out first";
  ASSERT_EQ(start.fds.size(), 1u) << "its disk travels with Start";
  Ready(0);
  auto created = Result("op-create");
  ASSERT_TRUE(created.has_value());
  EXPECT_FALSE(created->error.has_value()) << created->error->message;
  EXPECT_EQ(State("s1"), "running");
  EXPECT_EQ(host_.budget, 1);

  sessions_->Heartbeat();  // not idle yet: nothing is asked of the keeper
  event_base_loop(base_, EVLOOP_NONBLOCK);
  EXPECT_FALSE(host_.keepers[0].Poll());

  clock_.AdvanceMs(60001);
  sessions_->Heartbeat();
  Frame stop = FromKeeper(0);
  EXPECT_EQ(stop.type, static_cast<uint16_t>(SessionMsg::kStop));
  SessionEndedMsg ended;
  ended.why = "stopped";
  ASSERT_TRUE(host_.keepers[0].Send(static_cast<uint16_t>(SessionMsg::kEnded), EncodeMsg(ended)).ok());
  sessions_->Heartbeat();  // writes the record
  EXPECT_TRUE(RunUntil([&] { return State("s1") == "stopped"; })) << State("s1");
  EXPECT_EQ(host_.budget, 0) << "a stopped session holds none of the host budget";
  EXPECT_EQ(host_.released, 1);
}

TEST_F(SessionsTest, AKeeperThatDiesBeforeReadyFailsTheCreateOnce) {
  Send(intake_, "op-create", "create", "s2");
  Frame start = FromKeeper(0);
  ASSERT_EQ(start.type, static_cast<uint16_t>(SessionMsg::kStart));
  host_.keepers[0].ch.Close();  // dies while making the sandbox
  auto created = Result("op-create");
  ASSERT_TRUE(created.has_value());
  ASSERT_TRUE(created->error.has_value());
  EXPECT_EQ(created->error->code, ErrorCode::kSandboxFailed) << created->error->message;
  // Served once: no sandbox is started again for it (one keeper is started ahead, unused).
  for (int i = 0; i < 50; ++i) event_base_loop(base_, EVLOOP_NONBLOCK);
  EXPECT_LE(host_.keepers.size(), 2u);
  for (size_t n = 1; n < host_.keepers.size(); ++n) EXPECT_FALSE(host_.keepers[n].Poll()) << n;
  EXPECT_EQ(State("s2"), "error");
  EXPECT_EQ(host_.budget, 0);

  // A create sent again resumes it, and the disk no sandbox ever started on is still laid out.
  std::string own = keys_.SessionStream(config_.queue, config_.consumer);
  Send(own, "op-again", "create", "s2");
  Frame again = FromKeeper(1);
  ASSERT_EQ(again.type, static_cast<uint16_t>(SessionMsg::kStart));
  SessionStartMsg m;
  ASSERT_TRUE(DecodeMsg(again.payload, &m).ok());
  EXPECT_TRUE(m.fresh);
  Ready(1);
  auto resumed = Result("op-again");
  ASSERT_TRUE(resumed.has_value());
  EXPECT_FALSE(resumed->error.has_value()) << resumed->error->message;
}

// A stop followed by a resume costs no keeper's set-up: the keeper that ended the sandbox (and
// said it can serve again) takes the next start; one that cannot is let go.
TEST_F(SessionsTest, AKeeperWhoseSessionEndedServesTheNextStartUnlessItSaysItCannot) {
  const auto kStart = static_cast<uint16_t>(SessionMsg::kStart);
  Send(intake_, "op-create", "create", "s3", {{"idle_timeout_ms", 60000}});
  ASSERT_EQ(FromKeeper(0).type, kStart);
  Ready(0);
  auto created = Result("op-create");
  ASSERT_TRUE(created.has_value() && !created->error.has_value());
  auto stop_and_end = [&](size_t n, bool reusable) {
    clock_.AdvanceMs(60001);
    sessions_->Heartbeat();
    Frame stop = FromKeeper(n);
    ASSERT_EQ(stop.type, static_cast<uint16_t>(SessionMsg::kStop));
    SessionEndedMsg ended;
    ended.why = "stopped";
    ended.reusable = reusable;
    ASSERT_TRUE(host_.keepers[n].Send(static_cast<uint16_t>(SessionMsg::kEnded), EncodeMsg(ended)).ok());
    sessions_->Heartbeat();  // writes the record
    EXPECT_TRUE(RunUntil([&] { return State("s3") == "stopped"; })) << State("s3");
  };
  stop_and_end(0, true);
  EXPECT_EQ(host_.released, 0) << "its slot stays with the keeper, kept for the next start";
  const size_t started = host_.keepers.size();  // the first and the one started ahead

  std::string own = keys_.SessionStream(config_.queue, config_.consumer);
  Send(own, "op-resume", "create", "s3");
  Frame again = FromKeeper(0);
  ASSERT_EQ(again.type, kStart) << "the keeper that ended it starts it again";
  SessionStartMsg m;
  ASSERT_TRUE(DecodeMsg(again.payload, &m).ok());
  EXPECT_EQ(m.session, "s3");
  Ready(0);
  auto resumed = Result("op-resume");
  ASSERT_TRUE(resumed.has_value());
  EXPECT_FALSE(resumed->error.has_value()) << resumed->error->message;
  EXPECT_EQ(host_.keepers.size(), started) << "one was still ahead: no keeper was started";

  stop_and_end(0, false);
  EXPECT_EQ(host_.released, 1) << "a keeper that cannot serve again is let go";
  EXPECT_TRUE(RunUntil([&] {
    char c;
    return ::recv(host_.keepers[0].ch.fd(), &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  })) << "its channel is closed: it exits";

  // The next resume takes the keeper started ahead; when it ends, the host has no slot to spare
  // beside it: one that could serve again is let go all the same.
  Send(own, "op-resume-2", "create", "s3");
  ASSERT_EQ(FromKeeper(1).type, kStart);
  Ready(1);
  ASSERT_TRUE(Result("op-resume-2").has_value());
  host_.free_slots = 0;
  stop_and_end(1, true);
  EXPECT_EQ(host_.released, 2) << "kept only while every template could still start a keeper";
}

}  // namespace
}  // namespace sandpool
