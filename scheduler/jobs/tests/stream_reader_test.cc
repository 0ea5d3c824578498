// StreamReader against a real redis-server on a real event loop: when a read of a stream read
// when woken tells its owner the stream is empty.
#include "scheduler/jobs/stream_reader.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "scheduler/redis/tests/loop_redis_test.h"

namespace sandpool {
namespace {

class StreamReaderTest : public LoopRedisTest {
 protected:
  StreamReaderTest() { client_name_ = "sandpool:d1:cmd"; }
  void SetUp() override {
    config_.consumer = "d1";
    LoopRedisTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // One forward queue, read when woken, never reclaimed (no orphan search to wait for).
    std::vector<StreamReader::StreamSpec> streams;
    streams.push_back(StreamReader::StreamSpec{fwd_, [] { return size_t{1}; }, false, false, "python"});
    StreamReader::Hooks hooks;
    hooks.on_entries = [this](std::vector<StreamEntry> e) {
      for (StreamEntry& x : e) delivered_.push_back(x.fields["id"]);
    };
    hooks.holds = [](const std::string&, const std::string&) { return false; };
    hooks.on_empty = [this](const std::string&) {
      ++empties_;
      if (delivered_.empty()) ++empties_before_delivery_;
    };
    reader_ = std::make_unique<StreamReader>(nullptr, cmd_.get(), keys_, config_, std::move(streams), hooks);
    reader_->OnCommandConnected();
    // Created its group, scanned its own pending entries, read once: empty.
    ASSERT_TRUE(RunUntil([this] { return empties_ == 1; }));
  }
  void TearDown() override {
    // As the daemon does: the connection first, so the replies it still owes run (with nothing)
    // while the reader they call back into exists.
    if (cmd_) cmd_->Close();
    reader_.reset();
    LoopRedisTest::TearDown();
  }

  Keys keys_{"sandpool"};
  DaemonConfig config_;
  std::string fwd_ = "sandpool:fwd:default:python";
  std::unique_ptr<StreamReader> reader_;
  std::vector<std::string> delivered_;
  int empties_ = 0;
  int empties_before_delivery_ = 0;  // reported empty while nothing had been delivered yet
};

// The daemon moves an entry to a forward queue and notes a wake while a read of that queue, sent
// before, is on its way: that read comes back empty, but the queue is not empty (the daemon would
// let later entries overtake the moved one), and it is read again.
TEST_F(StreamReaderTest, AReadSentBeforeAWakeDoesNotReportTheStreamEmpty) {
  reader_->Wake("python");  // sends the read
  cmd_->Command({"XADD", fwd_, "*", "id", "moved"}, [](redisReply*) {});  // after it, as a FORWARD
  reader_->NoteWake("python");
  ASSERT_TRUE(RunUntil([this] { return !delivered_.empty(); }));
  EXPECT_EQ(delivered_, std::vector<std::string>{"moved"});
  // Only the first read's, in SetUp: the one sent before the wake reported nothing.
  EXPECT_EQ(empties_before_delivery_, 1);
  // Nothing more came: a later read says so.
  reader_->Wake("python");
  ASSERT_TRUE(RunUntil([this] { return empties_ >= 2; }));
  EXPECT_EQ(delivered_, std::vector<std::string>{"moved"});
}

// Without a wake on its way, an empty read is reported as such, and the stream is not read again
// until something wakes it.
TEST_F(StreamReaderTest, AnEmptyReadIsReportedAndTheStreamRestsUntilWoken) {
  Must({"XADD", fwd_, "*", "id", "quiet"});  // no wake: not read
  int64_t until = MonotonicUs() + 200'000;   // lets the loop run a while
  RunUntil([until] { return MonotonicUs() > until; });
  EXPECT_TRUE(delivered_.empty());
  reader_->Wake("python");
  ASSERT_TRUE(RunUntil([this] { return !delivered_.empty(); }));
  EXPECT_EQ(delivered_, std::vector<std::string>{"quiet"});
}

}  // namespace
}  // namespace sandpool
