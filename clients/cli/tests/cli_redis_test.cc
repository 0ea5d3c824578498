// The `sandpool` binary against a private redis-server and a fake daemon (a thread that reads
// the queue and plays back events and a result), to check streaming, the fallback on a sequence
// gap, exit codes, --json, result, cancel and submit. The real daemon's tests live in tests/.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <thread>

#include "common/clock.h"
#include "common/fd.h"
#include "queue/keys.h"
#include "queue/protocol.h"
#include "queue/redis_sync.h"

namespace sandpool::cli {
namespace {

#ifdef SANDPOOL_REDIS_SERVER
constexpr const char* kRedisServer = SANDPOOL_REDIS_SERVER;
#else
constexpr const char* kRedisServer = nullptr;
#endif

struct Ran {
  int status = -1;
  std::string out, err;
};

// Runs the CLI with `args`, stdin from /dev/null; collects both streams after it exits (the
// outputs here are far below a pipe's capacity).
Ran RunCli(const std::vector<std::string>& args) {
  Ran ran;
  auto out = MakePipe(), err = MakePipe();
  if (!out.ok() || !err.ok()) return ran;
  // Everything the child needs is made before fork: the test's fake daemon is a thread, and
  // between fork and exec only async-signal-safe calls are allowed (no allocation).
  std::vector<std::string> all = {SANDPOOL_CLI_BIN};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  UniqueFd devnull(open("/dev/null", O_RDONLY | O_CLOEXEC));
  pid_t pid = fork();
  if (pid == 0) {
    dup2(devnull.get(), 0);
    dup2(out->write.get(), 1);
    dup2(err->write.get(), 2);
    execv(SANDPOOL_CLI_BIN, argv.data());
    _exit(127);
  }
  out->write.reset();
  err->write.reset();
  int st = 0;
  waitpid(pid, &st, 0);
  ran.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  char buf[4096];
  ssize_t n;
  while ((n = read(out->read.get(), buf, sizeof(buf))) > 0) ran.out.append(buf, n);
  while ((n = read(err->read.get(), buf, sizeof(buf))) > 0) ran.err.append(buf, n);
  return ran;
}

class CliRedisTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kRedisServer) GTEST_SKIP() << "no redis-server";
    std::string tmpl = std::filesystem::temp_directory_path().string() + "/sp_cli_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    url_.unix_path = dir_ + "/r.sock";
    pid_ = fork();
    if (pid_ == 0) {
      int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
      dup2(devnull, 1);
      dup2(devnull, 2);
      execl(kRedisServer, kRedisServer, "--port", "0", "--unixsocket", url_.unix_path.c_str(),
            "--save", "", "--appendonly", "no", "--dir", dir_.c_str(), nullptr);
      _exit(127);
    }
    for (int i = 0; i < 500 && !redis_; ++i) {
      auto c = SyncRedis::Connect(url_, 1000);
      if (c.ok()) redis_ = std::move(c).value();
      else usleep(20000);
    }
    ASSERT_TRUE(redis_) << "redis-server did not start";
  }
  void TearDown() override {
    if (daemon_.joinable()) daemon_.join();
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  std::string UrlArg() const { return "--redis=unix://" + url_.unix_path; }

  // Starts a fake daemon that takes one job and calls `play(conn, spec)`.
  void FakeDaemon(std::function<void(SyncRedis&, const JobSpec&)> play) {
    daemon_ = std::thread([this, play] {
      auto c = SyncRedis::Connect(url_, 0);
      ASSERT_TRUE(c.ok());
      SyncRedis& r = *c.value();
      auto reply = r.Command({"XREAD", "BLOCK", "10000", "STREAMS", keys_.Queue("default"), "0"});
      ASSERT_TRUE(reply.ok()) << reply.status().message();
      ASSERT_EQ(reply.value()->type, REDIS_REPLY_ARRAY);
      const redisReply* fields = reply.value()->element[0]->element[1]->element[0]->element[1];
      ASSERT_EQ(fields->elements, 4u);
      EXPECT_EQ(std::string(fields->element[0]->str), "id");
      EXPECT_EQ(std::string(fields->element[2]->str), "job");
      auto job = DecodeJob(std::string_view(fields->element[3]->str, fields->element[3]->len),
                           ServerLimits{});
      ASSERT_TRUE(std::holds_alternative<JobSpec>(job));
      const JobSpec& spec = std::get<JobSpec>(job);
      EXPECT_EQ(spec.id, std::string(fields->element[1]->str, fields->element[1]->len));
      play(r, spec);
    });
  }

  static void Publish(SyncRedis& r, const std::string& id, const std::string& msg) {
    ASSERT_TRUE(r.Command({"PUBLISH", Keys().Out(id), msg}).ok());
  }
  static void Store(SyncRedis& r, const JobResult& res) {
    ASSERT_TRUE(r.Command({"SET", Keys().Result(res.id), EncodeResult(res)}).ok());
  }

  std::string dir_;
  RedisUrl url_;
  pid_t pid_ = -1;
  std::unique_ptr<SyncRedis> redis_;
  std::thread daemon_;
  Keys keys_;
};

JobResult MakeResult(const std::string& id, std::string out, std::string err, int code) {
  JobResult r;
  r.id = id;
  r.outcome = Outcome::kExit;
  r.exit_code = code;
  r.stdout_data = std::move(out);
  r.stderr_data = std::move(err);
  r.worker = "fake";
  r.attempt = 1;
  return r;
}

TEST_F(CliRedisTest, RunStreamsAndExitsWithJobStatus) {
  FakeDaemon([](SyncRedis& r, const JobSpec& spec) {
    EXPECT_EQ(spec.argv, (std::vector<std::string>{"echo", "hi"}));
    EXPECT_EQ(spec.env.size(), 1u);
    Publish(r, spec.id, EncodeStartedEvent(0, "fake", 1));
    Publish(r, spec.id, EncodeOutputEvent(1, "stdout", "hello "));
    Publish(r, spec.id, EncodeOutputEvent(2, "stderr", "warn\n"));
    Publish(r, spec.id, EncodeOutputEvent(3, "stdout", "world\n"));
    JobResult res = MakeResult(spec.id, "hello world\n", "warn\n", 3);
    Store(r, res);
    Publish(r, spec.id, EncodeExitedEvent(4, res));
  });
  Ran ran = RunCli({UrlArg(), "run", "--env", "A=1", "--", "echo", "hi"});
  EXPECT_EQ(ran.status, 3) << ran.err;
  EXPECT_EQ(ran.out, "hello world\n");
  EXPECT_EQ(ran.err, "warn\n");
}

TEST_F(CliRedisTest, GapFallsBackToTheResultKey) {
  FakeDaemon([](SyncRedis& r, const JobSpec& spec) {
    Publish(r, spec.id, EncodeStartedEvent(0, "fake", 1));
    Publish(r, spec.id, EncodeOutputEvent(1, "stdout", "part1,"));
    // seq 2 is "lost"
    Publish(r, spec.id, EncodeOutputEvent(3, "stdout", "part3"));
    usleep(200000);
    JobResult res = MakeResult(spec.id, "part1,part2,part3", "", 0);
    res.outcome = Outcome::kSignal;
    res.exit_code.reset();
    res.signal = 9;
    Store(r, res);  // no exited event at all
  });
  Ran ran = RunCli({UrlArg(), "run", "--shell", "x"});
  EXPECT_EQ(ran.status, 137) << ran.err;
  EXPECT_EQ(ran.out, "part1,part2,part3");
}

TEST_F(CliRedisTest, SilentJobFoundByIdleCheck) {
  FakeDaemon([](SyncRedis& r, const JobSpec& spec) {
    Store(r, MakeResult(spec.id, "quiet", "", 0));  // result only, never any event
  });
  Ran ran = RunCli({UrlArg(), "run", "--", "true"});
  EXPECT_EQ(ran.status, 0) << ran.err;
  EXPECT_EQ(ran.out, "quiet");
}

TEST_F(CliRedisTest, JsonAndErrorLine) {
  FakeDaemon([](SyncRedis& r, const JobSpec& spec) {
    Publish(r, spec.id, EncodeOutputEvent(0, "stdout", "not printed in json mode"));
    JobResult res = MakeResult(spec.id, "x", "", 0);
    res.outcome = Outcome::kError;
    res.exit_code.reset();
    res.error = JobError{ErrorCode::kExecFailed, "nope: not found"};
    Store(r, res);
    Publish(r, spec.id, EncodeExitedEvent(1, res));
  });
  Ran ran = RunCli({UrlArg(), "run", "--json", "--id", "json-1", "--", "nope"});
  EXPECT_EQ(ran.status, 125);
  EXPECT_EQ(ran.err, "");
  EXPECT_EQ(ran.out.rfind("{\"id\":\"json-1\",\"outcome\":\"error\"", 0), 0u) << ran.out;
  EXPECT_EQ(ran.out.back(), '\n');
  EXPECT_EQ(ran.out.find('\n'), ran.out.size() - 1);

  Ran again = RunCli({UrlArg(), "result", "json-1"});
  EXPECT_EQ(again.status, 125);
  EXPECT_EQ(again.out, "x");
  EXPECT_EQ(again.err, "sandpool: exec_failed: nope: not found\n");
}

TEST_F(CliRedisTest, SubmitResultCancelStatus) {
  Ran sub = RunCli({UrlArg(), "submit", "--id", "s1", "--", "sleep", "9"});
  EXPECT_EQ(sub.status, 0) << sub.err;
  EXPECT_EQ(sub.out, "s1\n");
  auto len = redis_->Command({"XLEN", keys_.Queue("default")});
  ASSERT_TRUE(len.ok());
  EXPECT_EQ(len.value()->integer, 1);

  Ran pending = RunCli({UrlArg(), "result", "s1"});
  EXPECT_EQ(pending.status, 3);
  EXPECT_NE(pending.err.find("not finished"), std::string::npos);
  int64_t t0 = MonotonicUs();
  Ran waited = RunCli({UrlArg(), "result", "--wait", "--timeout", "0.3", "s1"});
  EXPECT_EQ(waited.status, 3);
  EXPECT_GE(MonotonicUs() - t0, 300000);

  Ran cancel = RunCli({UrlArg(), "cancel", "s1"});
  EXPECT_EQ(cancel.status, 0) << cancel.err;
  auto flag = redis_->Command({"HGET", keys_.Job("s1"), "cancel"});
  ASSERT_TRUE(flag.ok());
  ASSERT_EQ(flag.value()->type, REDIS_REPLY_STRING);
  EXPECT_EQ(std::string(flag.value()->str), "1");
  auto ttl = redis_->Command({"TTL", keys_.Job("s1")});
  ASSERT_TRUE(ttl.ok());
  EXPECT_GT(ttl.value()->integer, 86000);

  ASSERT_TRUE(redis_->Command({"SET", keys_.Daemon("host-a"),
                               std::string("\x82\xa5slots\x04\xa4name\xa1h", 15)}).ok());
  Ran st = RunCli({UrlArg(), "status"});
  EXPECT_EQ(st.status, 0) << st.err;
  EXPECT_NE(st.out.find("1 entries"), std::string::npos) << st.out;
  EXPECT_NE(st.out.find("host-a: {\"slots\":4,\"name\":\"h\"}"), std::string::npos) << st.out;
  Ran sj = RunCli({UrlArg(), "status", "s1"});
  EXPECT_EQ(sj.status, 0);
  EXPECT_NE(sj.out.find("cancel: 1"), std::string::npos) << sj.out;
  EXPECT_NE(sj.out.find("result: not stored"), std::string::npos) << sj.out;
}

}  // namespace
}  // namespace sandpool::cli
