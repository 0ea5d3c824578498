// Session sandboxes, made through the spawner and a session keeper exactly as the daemon does it,
// without Redis: a disk made by the spawner, the agent driven over its socket. Needs root.
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "worker/ipc/channel.h"
#include "worker/ipc/messages.h"
#include "worker/ipc/session_messages.h"
#include "worker/keeper/spawner.h"
#include "worker/runners/nursery.h"

namespace sandpool {
namespace {

struct ExecRun {
  AgentStartedMsg started;
  AgentExitedMsg exited;
  std::string out, err;
};

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    dir_ = std::filesystem::temp_directory_path().string() + "/sp_session_test_" + std::to_string(::getpid());
    std::filesystem::create_directories(dir_);
    instance_ = "sandpool-session-test-" + std::to_string(::getpid());
    auto layout = SetUpCgroups("auto", instance_, false);
    ASSERT_TRUE(layout.ok()) << layout.status().message();
    layout_ = *layout;
    config_.host_id_base = 310000;
    auto sp = StartSpawner({config_}, layout_);
    ASSERT_TRUE(sp.ok()) << sp.status().message();
    spawner_pid_ = sp->pid;
    spawner_ = Channel(std::move(sp->channel));
    SpawnKeeperMsg req;
    req.session = true;
    ASSERT_TRUE(spawner_.Send(static_cast<uint16_t>(MsgType::kSpawnKeeper), Encode(req)).ok());
    auto f = spawner_.Receive();
    ASSERT_TRUE(f.ok()) << f.status().message();
    ASSERT_EQ(f->fds.size(), 2u);
    keeper_ = Channel(std::move(f->fds[0]));
  }

  void TearDown() override {
    agent_.Close();
    keeper_.Close();
    spawner_.Close();
    if (spawner_pid_ > 0) ::waitpid(spawner_pid_, nullptr, 0);
    for (int i = 0; i < 200 && !RemoveSlotCgroups(layout_).ok(); ++i) ::usleep(10000);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string MakeDisk(const std::string& name) {
    std::string path = dir_ + "/" + name + "/disk.img";
    MakeDiskMsg m{1, path, 64u << 20};
    EXPECT_TRUE(spawner_.Send(static_cast<uint16_t>(MsgType::kMakeDisk), Encode(m)).ok());
    auto f = spawner_.Receive();
    EXPECT_TRUE(f.ok());
    DiskMadeMsg made;
    EXPECT_TRUE(Decode(f->payload, &made).ok());
    EXPECT_EQ(made.error, "");
    return path;
  }

  // Starts the session on `disk`; the agent's socket is then agent_.
  void Start(const std::string& disk, bool fresh) {
    UniqueFd img(::open(disk.c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_TRUE(img.valid());
    SessionStartMsg m;
    m.session = "s1";
    m.fresh = fresh;
    ASSERT_TRUE(keeper_.Send(static_cast<uint16_t>(SessionMsg::kStart), EncodeMsg(m), {img.get()}).ok());
    auto f = keeper_.Receive();
    ASSERT_TRUE(f.ok());
    if (f->type == static_cast<uint16_t>(SessionMsg::kFailed)) {
      SessionFailedMsg failed;
      (void)DecodeMsg(f->payload, &failed);
      FAIL() << "session failed: " << failed.message;
    }
    ASSERT_EQ(f->type, static_cast<uint16_t>(SessionMsg::kReady));
    ASSERT_EQ(f->fds.size(), 1u);
    agent_ = Channel(std::move(f->fds[0]));
  }

  void Stop() {
    ASSERT_TRUE(keeper_.Send(static_cast<uint16_t>(SessionMsg::kStop), EncodeMsg(SessionStopMsg{})).ok());
    auto f = keeper_.Receive();
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->type, static_cast<uint16_t>(SessionMsg::kEnded));
    agent_.Close();
  }

  ExecRun Exec(AgentExecMsg m) {
    ExecRun r;
    m.req = ++req_;
    if (m.env.empty()) m.env = {"PATH=/usr/bin:/bin", "HOME=/work"};
    EXPECT_TRUE(agent_.Send(static_cast<uint16_t>(AgentMsg::kExec), EncodeMsg(m)).ok());
    UniqueFd out, err;
    for (;;) {
      auto f = agent_.Receive();
      EXPECT_TRUE(f.ok()) << f.status().message();
      if (!f.ok()) return r;
      if (f->type == static_cast<uint16_t>(AgentMsg::kStarted)) {
        EXPECT_TRUE(DecodeMsg(f->payload, &r.started).ok());
        if (r.started.error != 0) return r;
        EXPECT_EQ(f->fds.size(), 3u);
        f->fds[0].reset();  // stdin: closed at once
        out = std::move(f->fds[1]);
        err = std::move(f->fds[2]);
      } else if (f->type == static_cast<uint16_t>(AgentMsg::kExited)) {
        EXPECT_TRUE(DecodeMsg(f->payload, &r.exited).ok());
        break;
      }
    }
    r.out = DrainAll(out.get());
    r.err = DrainAll(err.get());
    return r;
  }

  static std::string DrainAll(int fd) {
    std::string s;
    char buf[4096];
    struct pollfd p = {fd, POLLIN, 0};
    while (::poll(&p, 1, 200) > 0) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      s.append(buf, static_cast<size_t>(n));
    }
    return s;
  }

  ExecRun Shell(const std::string& line, bool as_root = false) {
    AgentExecMsg m;
    m.shell = line;
    m.as_root = as_root;
    return Exec(m);
  }

  AgentReplyMsg File(const std::string& request) {
    AgentFileMsg m{++req_, request};
    EXPECT_TRUE(agent_.Send(static_cast<uint16_t>(AgentMsg::kFile), EncodeMsg(m)).ok());
    for (;;) {
      auto f = agent_.Receive();
      EXPECT_TRUE(f.ok());
      AgentReplyMsg r;
      if (!f.ok()) return r;
      if (f->type != static_cast<uint16_t>(AgentMsg::kReply)) continue;
      EXPECT_TRUE(DecodeMsg(f->payload, &r).ok());
      return r;
    }
  }

  // Whether this build's sessions have a shell mother (sanitizer builds have no nursery library).
  bool ShellMotherApplies() const { return SessionShellMotherApplies(config_) && OpenNurseryLibrary().valid(); }

  template <typename... Kv>
  static std::string Request(Kv... kv) {
    msgpack::sbuffer buf;
    msgpack::packer<msgpack::sbuffer> pk(buf);
    pk.pack_map(sizeof...(kv) / 2);
    (pk.pack(kv), ...);
    return std::string(buf.data(), buf.size());
  }

  std::string dir_, instance_;
  CgroupLayout layout_;
  SandboxConfig config_;
  pid_t spawner_pid_ = -1;
  Channel spawner_, keeper_, agent_;
  uint64_t req_ = 0;
};

TEST_F(SessionTest, CommandsFilesAndProcessesSurviveStopAndResume) {
  std::string disk = MakeDisk("s1");
  Start(disk, true);
  ExecRun hi = Shell("echo hi; id -u; pwd");
  EXPECT_EQ(hi.started.error, 0);
  EXPECT_EQ(hi.out, "hi\n1000\n/work\n");
  EXPECT_TRUE(WIFEXITED(hi.exited.wait_status));
  // Files anywhere: the workspace, /tmp, and (as the session's root) a system directory.
  EXPECT_EQ(Shell("echo kept > /work/a; echo tmp > /tmp/b").exited.wait_status, 0);
  ExecRun root = Shell("mkdir -p /usr/local/lib/sp && echo sys > /usr/local/lib/sp/c && id -u", true);
  EXPECT_EQ(root.out, "0\n") << root.err;
  AgentExecMsg argv;
  argv.argv = {"cat", "/work/a"};
  EXPECT_EQ(Exec(argv).out, "kept\n");
  AgentExecMsg missing;
  missing.argv = {"no-such-program"};
  EXPECT_EQ(Exec(missing).started.error, ENOENT);
  Stop();

  Start(disk, false);
  EXPECT_EQ(Shell("cat /work/a /tmp/b /usr/local/lib/sp/c").out, "kept\ntmp\nsys\n");
  EXPECT_EQ(Shell("ls -ld /work | cut -d' ' -f3").out, "sandbox\n");
  Stop();
}

TEST_F(SessionTest, FileOperationsRunAsTheSessionsUserInsideIt) {
  Start(MakeDisk("s2"), true);
  AgentReplyMsg w = File(Request("op", "write", "files",
                                 std::vector<std::map<std::string, std::string>>{{{"path", "/work/d/f.txt"}, {"data", "abc"}}}));
  EXPECT_EQ(w.error, "") << w.message;
  AgentReplyMsg r = File(Request("op", "read", "path", "/work/d/f.txt"));
  EXPECT_EQ(r.error, "") << r.message;
  EXPECT_NE(r.value.find("abc"), std::string::npos);
  // The job user may not write the session's system directories; root may.
  AgentReplyMsg denied = File(Request("op", "mkdir", "path", "/usr/lib/sp-denied"));
  EXPECT_EQ(denied.error, "permission");
  AgentReplyMsg allowed = File(Request("op", "mkdir", "path", "/usr/lib/sp-allowed", "as_root", true));
  EXPECT_EQ(allowed.error, "") << allowed.message;
  // Links the session plants lead nowhere outside it.
  EXPECT_EQ(Shell("ln -s /proc/1/root/../../../../etc/shadow /work/l; ln -s / /work/root").exited.wait_status, 0);
  AgentReplyMsg shadow = File(Request("op", "read", "path", "/work/l"));
  EXPECT_EQ(shadow.error, "not_found");
  AgentReplyMsg fifo_made = File(Request("op", "exists", "path", "/work/root/etc/passwd"));
  EXPECT_EQ(fifo_made.error, "");
  EXPECT_EQ(Shell("mkfifo /work/p").exited.wait_status, 0);
  EXPECT_EQ(File(Request("op", "read", "path", "/work/p")).error, "not_a_file");
  EXPECT_EQ(File(Request("op", "read", "path", "/dev/zero")).error, "not_a_file");
  EXPECT_EQ(File(Request("op", "read", "path", "/work/nope")).error, "not_found");
  Stop();
}

// The session's ext4 is mounted noauto_da_alloc: replacing a file's contents (O_TRUNC, or a
// rename over it) must not start writeback of the new data at close, which for a 1 MiB
// write_file over an existing file cost more machine CPU (the loop worker's copy into the image)
// than the operation itself. Found from the mount table, in whichever process holds the mount.
TEST_F(SessionTest, TheDiskIsMountedWithoutWritebackOnReplace) {
  std::string disk = MakeDisk("s4");
  Start(disk, true);
  std::string dev;  // "7:<minor>" of the loop device whose backing file is `disk`
  for (const auto& e : std::filesystem::directory_iterator("/sys/block")) {
    std::string name = e.path().filename().string();
    if (name.rfind("loop", 0) != 0) continue;
    std::ifstream backing(e.path() / "loop" / "backing_file");
    std::string file;
    if (backing && std::getline(backing, file) && file == std::filesystem::canonical(disk).string()) {
      dev = "7:" + name.substr(4);
    }
  }
  ASSERT_FALSE(dev.empty()) << "no loop device backs " << disk;
  std::string super_options;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    UniqueFd fd(::open((e.path() / "mountinfo").c_str(), O_RDONLY | O_CLOEXEC));
    std::string text;
    char buf[4096];
    for (ssize_t n; fd && (n = ::read(fd.get(), buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
    size_t at = text.find(" " + dev + " ");
    if (at == std::string::npos) continue;
    std::string line = text.substr(at, text.find('\n', at) - at);
    size_t sep = line.find(" - ext4 ");
    ASSERT_NE(sep, std::string::npos) << line;
    super_options = line.substr(line.rfind(' ') + 1);
    break;
  }
  ASSERT_FALSE(super_options.empty()) << "no process holds " << dev;
  EXPECT_NE(("," + super_options + ",").find(",noauto_da_alloc,"), std::string::npos) << super_options;
  // A file replaced just before the stop still has its new contents after the resume.
  EXPECT_EQ(Shell("head -c 1048576 /dev/urandom > /work/r; echo first > /work/r; echo second > /work/r").exited.wait_status,
            0);
  Stop();
  Start(disk, false);
  EXPECT_EQ(Shell("cat /work/r").out, "second\n");
  Stop();
}

// `kill -9 -1` from the session's root ends every process but init, warm shells included, all at
// once: the agent must keep serving (it once indexed its warm shells across their removal).
// A session's warm shells are clones of one preloaded shell (runners/session_shell_mother.h):
// she is confined as each shell is (the session's user, no capabilities, no_new_privs, the
// filter), the agent's child like them, and what she was started with to load the library is
// nowhere in a shell's environment, nor in what her own /proc/<pid>/environ shows. Killed by the session's own code, the agent starts its shells itself.
TEST_F(SessionTest, WarmShellsAreClonesOfOneConfinedShellMother) {
  if (!ShellMotherApplies()) GTEST_SKIP() << "no nursery library in this build";
  Start(MakeDisk("s4"), true);
  const std::string probe =
      "m=$(grep -lx sandpool-shells /proc/[0-9]*/comm); echo mothers $(echo $m | wc -w); "
      "for f in $m; do grep -E '^(PPid|Uid|CapEff|NoNewPrivs|Seccomp):' ${f%/comm}/status | tr -s '\\t' ' '; "
      "echo shown $(tr '\\0' '\\n' < ${f%/comm}/environ | grep -c '^LD_'); done; "
      "echo preload $(tr '\\0' '\\n' < /proc/$$/environ | grep -c '^LD_'); "
      "echo comm $(cat /proc/$$/comm) ppid $(cut -d' ' -f4 /proc/$$/stat)";
  for (int i = 0; i < 3; ++i) {
    ExecRun r = Shell(probe);
    EXPECT_EQ(r.out,
              "mothers 1\nPPid: 1\nUid: 1000 1000 1000 1000\nCapEff: 0000000000000000\nNoNewPrivs: 1\nSeccomp: 2\n"
              "shown 0\npreload 0\ncomm sh ppid 1\n")
        << r.err;
  }
  // Gone once the agent has reaped her (a zombie keeps her name in /proc until then).
  ExecRun k = Shell(
      "p=$(grep -lx sandpool-shells /proc/[0-9]*/comm | cut -d/ -f3) && kill -9 $p && "
      "while [ -e /proc/$p ]; do sleep 0.01; done && echo killed");
  EXPECT_EQ(k.out, "killed\n") << k.err;
  int after = 0;
  for (int i = 0; i < 5; ++i) {
    ExecRun r = Shell("echo alive; grep -lx sandpool-shells /proc/[0-9]*/comm | wc -l");
    after += r.out == "alive\n0\n";
  }
  EXPECT_EQ(after, 5);
  Stop();
}

// The session's code may also stop its shell mother: a line that waits for a shell she owes is
// started by the agent after a few seconds, and she is replaced by the agent's own starts.
TEST_F(SessionTest, AShellMotherTheSessionStopsIsGivenUp) {
  if (!ShellMotherApplies()) GTEST_SKIP() << "no nursery library in this build";
  Start(MakeDisk("s5"), true);
  ExecRun k = Shell("kill -STOP $(grep -lx sandpool-shells /proc/[0-9]*/comm | cut -d/ -f3) && echo stopped");
  EXPECT_EQ(k.out, "stopped\n") << k.err;
  for (int i = 0; i < 6; ++i) EXPECT_EQ(Shell("echo " + std::to_string(i)).out, std::to_string(i) + "\n");
  // Killed by the agent and reaped by it when its loop next runs.
  EXPECT_EQ(Shell("for i in $(seq 200); do n=$(grep -lx sandpool-shells /proc/[0-9]*/comm | wc -l); "
                  "[ $n = 0 ] && break; sleep 0.05; done; echo $n").out,
            "0\n");
  Stop();
}

TEST_F(SessionTest, KillingEveryProcessLeavesTheAgentServing) {
  Start(MakeDisk("s3"), true);
  for (int round = 0; round < 10; ++round) {
    ExecRun k = Shell("kill -9 -1; echo after", round % 2 == 0);
    (void)k;  // the line kills itself too; what matters is what comes next
    int ok = 0;
    for (int i = 0; i < 3 && ok == 0; ++i) ok += Shell("echo alive").out == "alive\n";
    ASSERT_EQ(ok, 1) << "round " << round;
  }
  Stop();
}

}  // namespace
}  // namespace sandpool
