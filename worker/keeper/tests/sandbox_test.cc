// Real sandboxes, created through the spawner and a keeper exactly as the daemon does it, without
// Redis. Needs root (namespaces, cgroups).
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <utility>

#include "worker/ipc/channel.h"
#include "worker/ipc/messages.h"
#include "worker/keeper/spawner.h"
#include "worker/runners/nursery.h"
#include "worker/runners/zygote.h"

namespace sandpool {
namespace {

struct JobRun {
  ExitedMsg exited;
  std::string out, err;
  bool got_started = false;
};

class SandboxTest : public ::testing::Test {
 protected:
  virtual const char* CgroupMode() const { return "auto"; }
  virtual const char* Runtime() const { return ""; }
  // Per-fixture changes to the sandbox definition, made before the keeper is spawned.
  virtual void Configure(SandboxConfig&) {}
  JobRun RunCode(const std::string& code, const std::string& stdin_data = "") {
    return Run({}, stdin_data, false, "code", code);
  }
  JobRun RunShell(const std::string& line) { return Run({"/bin/sh", "-c", line}, "", false, "shell", line); }

  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    instance_ = "sandpool-test-" + std::to_string(::getpid());
    auto layout = SetUpCgroups(CgroupMode(), instance_, std::string(CgroupMode()) == "v2");
    ASSERT_TRUE(layout.ok()) << layout.status().message();
    layout_ = *layout;
    config_.host_id_base = 300000;
    config_.runtime = Runtime();
    Configure(config_);
    if (HasFatalFailure() || IsSkipped()) return;
    auto sp = StartSpawner({config_}, layout_);
    ASSERT_TRUE(sp.ok()) << sp.status().message();
    spawner_pid_ = sp->pid;
    spawner_ = Channel(std::move(sp->channel));
    ASSERT_TRUE(spawner_.Send(static_cast<uint16_t>(MsgType::kSpawnKeeper), Encode(SpawnKeeperMsg{0})).ok());
    auto f = spawner_.Receive();
    ASSERT_TRUE(f.ok()) << f.status().message();
    ASSERT_EQ(f->type, static_cast<uint16_t>(MsgType::kKeeper));
    ASSERT_EQ(f->fds.size(), 2u);  // the channel and the keeper's pidfd
    keeper_ = Channel(std::move(f->fds[0]));
  }

  void TearDown() override {
    keeper_.Close();
    spawner_.Close();
    if (spawner_pid_ > 0) ::waitpid(spawner_pid_, nullptr, 0);
    // Keepers die with their channel; their slot cgroups empty out shortly after.
    for (const auto& [ctrl, dir] : layout_.instance_dirs) {
      for (int i = 0; i < 200; ++i) {
        std::string slot = dir + "/slot-0";
        if (::rmdir(slot.c_str()) == 0 || errno == ENOENT) break;
        ::usleep(10000);
      }
      if (layout_.mode == CgroupMode::kV2) {
        // Leave the supervisor leaf first: a cgroup holding a process cannot be removed.
        std::string root = dir.substr(0, dir.rfind('/'));
        std::ofstream(root + "/cgroup.procs") << ::getpid();
        ::rmdir((dir + "/supervisor").c_str());
      }
      ::rmdir(dir.c_str());
    }
  }

  // Waits for Ready and returns the generation; fills the stdio fds.
  uint64_t WaitReady() {
    for (;;) {
      auto f = keeper_.Receive();
      EXPECT_TRUE(f.ok()) << f.status().message();
      if (!f.ok()) return 0;
      if (f->type == static_cast<uint16_t>(MsgType::kFailed)) {
        FailedMsg m;
        (void)Decode(f->payload, &m);
        ADD_FAILURE() << "sandbox failed: " << m.message;
        return 0;
      }
      if (f->type != static_cast<uint16_t>(MsgType::kReady)) continue;
      ReadyMsg r;
      EXPECT_TRUE(Decode(f->payload, &r).ok());
      EXPECT_EQ(f->fds.size(), 3u);
      stdin_ = std::move(f->fds[0]);
      stdout_ = std::move(f->fds[1]);
      stderr_ = std::move(f->fds[2]);
      return r.generation;
    }
  }

  // `ready_gen`: a sandbox WaitReady() already returned (0: wait for the next one).
  JobRun Run(std::vector<std::string> argv, const std::string& stdin_data = "", bool kill_after_start = false,
             const std::string& kind = "argv", const std::string& code = "", uint64_t ready_gen = 0) {
    JobRun jr;
    uint64_t gen = ready_gen != 0 ? ready_gen : WaitReady();
    if (gen == 0) return jr;
    RunMsg run;
    run.generation = gen;
    run.kind = kind;
    run.code = code;
    run.argv = std::move(argv);
    run.env = {"PATH=/usr/bin:/bin", "HOME=/work"};
    run.cwd = "/work";
    run.memory_bytes = std::exchange(next_memory_bytes_, 0);
    EXPECT_TRUE(keeper_.Send(static_cast<uint16_t>(MsgType::kRun), Encode(run)).ok());
    if (!stdin_data.empty()) {
      EXPECT_TRUE(WriteAll(stdin_.get(), stdin_data.data(), stdin_data.size()).ok());
    }
    stdin_.reset();
    for (;;) {
      auto f = keeper_.Receive();
      EXPECT_TRUE(f.ok());
      if (!f.ok()) return jr;
      if (f->type == static_cast<uint16_t>(MsgType::kStarted)) {
        jr.got_started = true;
        if (kill_after_start) {
          // Kill once the job has shown it is running (its first output), not merely exec'd.
          char c;
          while (::read(stdout_.get(), &c, 1) == 1) {
            jr.out += c;
            if (c == '\n') break;
          }
          EXPECT_TRUE(keeper_.Send(static_cast<uint16_t>(MsgType::kKill), Encode(GenerationMsg{gen})).ok());
        }
      }
      if (f->type == static_cast<uint16_t>(MsgType::kExited)) {
        EXPECT_TRUE(Decode(f->payload, &jr.exited).ok());
        break;
      }
    }
    jr.out += ReadAll(stdout_.get());
    jr.err = ReadAll(stderr_.get());
    return jr;
  }

  static std::string ReadAll(int fd) {
    std::string s;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) s.append(buf, static_cast<size_t>(n));
    return s;
  }

  // /proc/<pid>/<name>, or what was read of it before the process went (a read of a vanishing
  // process fails with ESRCH, which std::ifstream turns into an exception).
  static std::string ProcFile(pid_t pid, const char* name) {
    UniqueFd fd(::open(("/proc/" + std::to_string(pid) + "/" + name).c_str(), O_RDONLY | O_CLOEXEC));
    return fd ? ReadAll(fd.get()) : std::string();
  }

  // The parent of host process `pid` (its stat line's 4th field), or 0 if it is gone.
  static pid_t ParentPid(pid_t pid) {
    std::string line = ProcFile(pid, "stat");
    size_t paren = line.rfind(')');
    return paren == std::string::npos ? 0 : std::atoi(line.substr(paren + 4).c_str());
  }

  // Host processes whose real uid is `uid`.
  static int CountProcessesOfUid(uid_t uid) {
    int count = 0;
    DIR* d = ::opendir("/proc");
    while (struct dirent* e = ::readdir(d)) {
      struct stat st;
      std::string p = std::string("/proc/") + e->d_name;
      if (e->d_name[0] >= '0' && e->d_name[0] <= '9' && ::stat(p.c_str(), &st) == 0 && st.st_uid == uid) ++count;
    }
    ::closedir(d);
    return count;
  }

  std::string instance_;
  uint64_t next_memory_bytes_ = 0;  // the next Run's memory limit (0: the slot's default)
  CgroupLayout layout_;
  SandboxConfig config_;
  pid_t spawner_pid_ = -1;
  Channel spawner_, keeper_;
  UniqueFd stdin_, stdout_, stderr_;
};

TEST_F(SandboxTest, RunsShellWithOutputAndExitCode) {
  JobRun r = Run({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"});
  EXPECT_TRUE(r.got_started);
  ASSERT_TRUE(r.exited.have_status);
  EXPECT_TRUE(WIFEXITED(r.exited.wait_status));
  EXPECT_EQ(WEXITSTATUS(r.exited.wait_status), 3);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
  EXPECT_FALSE(r.exited.killed);
}

TEST_F(SandboxTest, AccountingComesFromTheCgroup) {
  JobRun r = Run({"/bin/sh", "-c", "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done; echo $i"});
  EXPECT_EQ(r.out, "30000\n");
  EXPECT_GT(r.exited.cpu_time_us, 0u);
  EXPECT_GT(r.exited.peak_memory_bytes, 0u);
  EXPECT_GT(r.exited.exec_time_us, 0u);
}

TEST_F(SandboxTest, MemoryAndPidsLimitsAreEnforcedAndReported) {
  // The slot default is 512 MiB; ask for more than that from one process.
  JobRun mem = Run({"/usr/bin/python3", "-c", "b = bytearray(900 * 1024 * 1024); print(len(b))"});
  EXPECT_GT(mem.exited.oom_kills, 0u) << mem.out << mem.err;
  JobRun pids = Run({"/bin/sh", "-c", "for i in $(seq 400); do sleep 5 & done 2>/dev/null; echo spawned"});
  EXPECT_GT(pids.exited.pids_max_hits, 0u);
  JobRun after = Run({"/bin/echo", "fine"});
  EXPECT_EQ(after.out, "fine\n");
}

// One slot: every sandbox after the first runs in the cgroup its predecessor left, reset for it
// (SandboxCgroup::Recycle), so nothing a job did or asked for may show in the next one's figures.
TEST_F(SandboxTest, TheNextSandboxInheritsNeitherFiguresNorLimits) {
  const char* touch100 = "b = bytearray(100 << 20); print(len(b))";
  next_memory_bytes_ = 48ull << 20;
  JobRun limited = Run({"/usr/bin/python3", "-c", touch100});
  EXPECT_GT(limited.exited.oom_kills, 0u) << limited.out << limited.err;
  JobRun big = Run({"/usr/bin/python3", "-c", touch100});  // the slot's default limit again
  EXPECT_EQ(big.out, std::to_string(100 << 20) + "\n") << big.err;
  EXPECT_EQ(big.exited.oom_kills, 0u);
  EXPECT_GT(big.exited.peak_memory_bytes, 100ull << 20);
  JobRun spin = Run({"/bin/sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"});
  JobRun after = Run({"/bin/true"});
  EXPECT_LT(after.exited.peak_memory_bytes, 30ull << 20);
  EXPECT_LT(after.exited.cpu_time_us, spin.exited.cpu_time_us / 4);
  EXPECT_EQ(after.exited.oom_kills, 0u);
}

TEST_F(SandboxTest, StdinReachesTheJobAndPathIsSearched) {
  JobRun r = Run({"cat"}, "hello stdin");
  EXPECT_EQ(r.out, "hello stdin");
}

TEST_F(SandboxTest, JobIsUnprivilegedInItsOwnNamespaces) {
  JobRun r = Run({"/bin/sh", "-c",
                  "id -u; id -g; hostname; grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; "
                  "ls /proc | grep -c '^[0-9]'; ls /sys 2>&1 | head -1; cat /proc/net/dev | grep -c ':'"});
  EXPECT_EQ(r.out.substr(0, 5), "1000\n");
  EXPECT_NE(r.out.find("\n1000\nsandbox\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CapEff:\t0000000000000000"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CapBnd:\t0000000000000000"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NoNewPrivs:\t1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Seccomp:\t2"), std::string::npos) << r.out;
  // Only loopback in the network namespace.
  EXPECT_EQ(r.out.substr(r.out.size() - 2), "1\n") << r.out;
}

TEST_F(SandboxTest, RootIsMinimalAndReadOnly) {
  JobRun r = Run({"/bin/sh", "-c",
                  "ls /; touch /usr/x 2>/dev/null && echo USR-WRITABLE; touch /etc/x 2>/dev/null && echo ETC-WRITABLE;"
                  " test -e /etc/shadow && echo SHADOW; echo ok > /work/f && cat /work/f; pwd"});
  EXPECT_EQ(r.out.find("WRITABLE"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("SHADOW"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("home"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok\n/work\n"), std::string::npos) << r.out;
}

TEST_F(SandboxTest, BackgroundProcessesDieWithTheJob) {
  uid_t job_uid = config_.host_id_base + 1;
  JobRun r = Run({"/bin/sh", "-c", "(setsid sleep 1000 &) ; nohup sleep 1000 >/dev/null 2>&1 & echo started"});
  EXPECT_EQ(r.out, "started\n");
  EXPECT_EQ(CountProcessesOfUid(job_uid), 0);
  // And the slot serves the next job.
  JobRun again = Run({"/bin/echo", "next"});
  EXPECT_EQ(again.out, "next\n");
}

TEST_F(SandboxTest, KillEndsARunningJob) {
  JobRun r = Run({"/bin/sh", "-c", "echo before; exec sleep 1000"}, "", true);
  EXPECT_TRUE(r.exited.killed);
  EXPECT_EQ(r.out, "before\n");
}

TEST_F(SandboxTest, ExecFailureIsReported) {
  JobRun r = Run({"/no/such/binary"});
  EXPECT_FALSE(r.exited.started);
  EXPECT_EQ(r.exited.exec_errno, ENOENT);
  EXPECT_EQ(r.exited.exec_stage, "exec");
  ASSERT_TRUE(r.exited.have_status);
  EXPECT_EQ(WEXITSTATUS(r.exited.wait_status), 127);
}

TEST_F(SandboxTest, NothingOfOneJobIsVisibleToTheNext) {
  JobRun a = Run({"/bin/sh", "-c", "echo secret > /work/a; echo secret > /tmp/b; echo s > /dev/shm/c; echo done"});
  EXPECT_EQ(a.out, "done\n");
  JobRun b = Run({"/bin/sh", "-c", "ls -A /work /tmp /dev/shm | grep -v : | grep . ; echo end"});
  EXPECT_EQ(b.out, "end\n");
}

// cgroup v2 on this host's unified hierarchy. Its memory, pids and cpu controllers are bound to
// v1 here, so only what v2 itself provides can be checked: placement of each sandbox straight
// into its slot cgroup by clone3(CLONE_INTO_CGROUP), CPU accounting from cpu.stat, teardown and
// removal. Production hosts (pure v2 with delegated controllers) get the limits as well.
class SandboxV2Test : public SandboxTest {
 protected:
  const char* CgroupMode() const override { return "v2"; }
  void SetUp() override {
    struct stat st;
    if (::stat("/sys/fs/cgroup/unified/cgroup.procs", &st) != 0 && ::stat("/sys/fs/cgroup/cgroup.subtree_control", &st) != 0) {
      GTEST_SKIP() << "no cgroup2 hierarchy on this host";
    }
    SandboxTest::SetUp();
  }
};

TEST_F(SandboxV2Test, SandboxIsBornInsideItsSlotCgroup) {
  ASSERT_EQ(layout_.mode, CgroupMode::kV2);
  JobRun r = Run({"/bin/sh", "-c", "cat /proc/self/cgroup | grep '^0::'; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"});
  // The cgroup namespace makes the slot cgroup the job's root.
  EXPECT_EQ(r.out, "0::/\n");
  EXPECT_GT(r.exited.cpu_time_us, 0u);
  uid_t job_uid = config_.host_id_base + 1;
  JobRun bg = Run({"/bin/sh", "-c", "sleep 1000 & echo started"});
  EXPECT_EQ(bg.out, "started\n");
  EXPECT_EQ(CountProcessesOfUid(job_uid), 0);
  // From the host, the slot holds nothing between jobs but the next prepared sandbox, in a
  // cgroup of its own (the last job's is gone).
  ASSERT_GT(WaitReady(), 0u);
  std::string slot = layout_.instance_dirs.at("") + "/slot-0";
  std::vector<std::string> children;
  for (const auto& e : std::filesystem::directory_iterator(slot)) {
    if (e.is_directory()) children.push_back(e.path().string());
  }
  ASSERT_EQ(children.size(), 1u);
  auto count_procs = [](const std::string& dir) {
    std::ifstream procs(dir + "/cgroup.procs");
    int count = 0;
    for (std::string line; std::getline(procs, line);) ++count;
    return count;
  };
  EXPECT_EQ(count_procs(slot), 0);
  EXPECT_EQ(count_procs(children[0]), 2) << "the next sandbox's init and stub";
}

// Warm interpreters: the sandbox's main process is the template's interpreter, started before
// the job; the job arrives as a script (sh) or JSON (python, node).
class ShZygoteTest : public SandboxTest {
 protected:
  const char* Runtime() const override { return "sh"; }
};

TEST_F(ShZygoteTest, ShellJobsRunInTheWarmShell) {
  JobRun r = RunShell("echo out; echo err >&2; echo \"$GREETING\" $(pwd); exit 3");
  EXPECT_TRUE(r.got_started);
  ASSERT_TRUE(r.exited.have_status);
  EXPECT_EQ(WEXITSTATUS(r.exited.wait_status), 3);
  EXPECT_EQ(r.out, "out\n /work\n");  // GREETING is not set: only the job's env exists
  EXPECT_EQ(r.err, "err\n");
  JobRun fds = RunShell("ls /proc/self/fd | tr '\\n' ' '; id -u");
  EXPECT_EQ(fds.out, "0 1 2 3 1000\n") << "only stdio (3 is ls's own directory fd)";
  // The shell itself too: not its script's pipe, nor what it opened to read it.
  JobRun own = RunShell("for fd in $(seq 3 63); do [ -e /proc/self/fd/$fd ] && echo open $fd; done; echo end");
  EXPECT_EQ(own.out, "end\n");
}

// The script comes on the stub's script pipe (stub_protocol.h, 'W'), many times the pipe's
// buffer here, written as the shell takes it. A script that ends early runs nothing after its
// end, and the next job is served all the same. (That the job has no fd but its stdio is
// ShellJobsRunInTheWarmShell's check.)
TEST_F(ShZygoteTest, LongScriptsArriveWholeAndMayEndEarly) {
  std::string filler = "  # a comment that makes the line about sixty bytes long\n";
  std::string whole = "n=0\n";
  for (int i = 0; i < 12000; ++i) whole += "n=$((n+1))" + filler;
  whole += "echo $n\n";
  ASSERT_GT(whole.size(), 600u << 10);
  JobRun r = RunShell(whole);
  EXPECT_EQ(r.out, "12000\n") << r.err;
  std::string early = "echo first; exit 7\n";
  for (int i = 0; i < 12000; ++i) early += "echo never" + filler;
  JobRun e = RunShell(early);
  EXPECT_EQ(e.out, "first\n") << e.err;
  ASSERT_TRUE(e.exited.have_status);
  EXPECT_EQ(WEXITSTATUS(e.exited.wait_status), 7);
  EXPECT_EQ(RunShell("echo next").out, "next\n");
}

// Shell sandboxes come from the slot's nursery mother (worker/runners/nursery.h: the warm shell
// with the library preloaded) except in sanitizer builds: one user namespace for the slot, a
// fresh sandbox per job all the same, and each job's shell a copy of hers, not an exec.
TEST_F(ShZygoteTest, ShellSandboxesComeFromTheSlotsMother) {
  if (!NurseryApplies(config_) || !OpenNurseryLibrary()) GTEST_SKIP() << "no shell nursery in this build";
  // The mother: the slot's process running as sandbox root, a child of her own sandbox's init
  // (sandbox root too), whose parent (the keeper) is host root.
  auto uid_of = [](pid_t pid) {
    struct stat st;
    return ::stat(("/proc/" + std::to_string(pid)).c_str(), &st) == 0 ? st.st_uid : static_cast<uid_t>(-1);
  };
  auto mother_pid = [&]() {
    pid_t found = -1;
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      std::string name = e.path().filename();
      if (name[0] < '0' || name[0] > '9') continue;
      pid_t pid = std::atoi(name.c_str());
      if (uid_of(pid) != config_.host_id_base || uid_of(ParentPid(pid)) != config_.host_id_base) continue;
      if (uid_of(ParentPid(ParentPid(pid))) == 0) found = pid;
    }
    return found;
  };
  JobRun a = RunShell("echo x > /work/a; readlink /proc/self/ns/user; ls /proc | grep -c '^[0-9]'; id -u");
  pid_t mother = mother_pid();
  ASSERT_GT(mother, 0);
  char own_ns[64] = {};
  ASSERT_GT(::readlink(("/proc/" + std::to_string(mother) + "/ns/user").c_str(), own_ns, sizeof own_ns - 1), 0);
  // The job's user namespace is the mother's; its pid namespace holds only init, the shell and
  // the shell's children (ls, grep); it runs as uid 1000.
  EXPECT_EQ(a.out, std::string(own_ns) + "\n4\n1000\n") << a.err;
  // Two filters: the mother's, inherited, and the job's small one over it (seccomp_policy.h).
  JobRun b = RunShell("test -e /work/a && echo found; grep -E '^(CapEff|NoNewPrivs|Seccomp|Seccomp_filters):' /proc/self/status | tr -s '\t\n' '  '");
  EXPECT_EQ(b.out, "CapEff: 0000000000000000 NoNewPrivs: 1 Seccomp: 2 Seccomp_filters: 2 ") << b.err;
  // The job's shell is the mother's copy, not an exec (the library she was started with is mapped
  // in it), and the loader's variables she was started with are gone: from the shell's
  // variables, from what its children inherit, and from its /proc/<pid>/environ, which shows
  // the sandbox's environment and nothing after it.
  JobRun c = RunShell("readlink /proc/$$/exe; grep -q libsandpool_nursery /proc/$$/maps && echo preloaded; "
                      "echo ${LD_PRELOAD-unset} ${LD_BIND_NOW-unset}; env | grep -c '^LD_'; "
                      "tr '\\0' '\\n' < /proc/$$/environ | grep -c -E '^(LD_|$)'");
  EXPECT_EQ(c.out, "/usr/bin/dash\npreloaded\nunset unset\n0\n0\n") << c.err;
  EXPECT_EQ(mother_pid(), mother) << "one mother serves the slot";
  {
    std::ifstream status("/proc/" + std::to_string(mother) + "/status");
    std::string all((std::istreambuf_iterator<char>(status)), {});
    EXPECT_NE(all.find("Seccomp_filters:\t1\n"), std::string::npos) << "the mother holds her own filter";
  }
  // The OOM killer's first choice is the job, not init (whose death would take the mother).
  EXPECT_EQ(RunShell("cat /proc/self/oom_score_adj /proc/1/oom_score_adj").out, "1000\n0\n");
  // The mother's mounts are not copied into the sandbox: each place is mounted once, but for
  // /proc over the keeper's bind and the mother's own (rootfs.h, MountMotherFilesystems).
  EXPECT_EQ(RunShell("awk '{print $5}' /proc/self/mountinfo | sort | uniq -c | awk '$1 > 1 {print $1, $2}'").out,
            "3 /proc\n");
}

TEST_F(ShZygoteTest, ArgvJobsExecAndReportMissingBinaries) {
  JobRun r = Run({"/bin/echo", "a b", "it's"});
  EXPECT_EQ(r.out, "a b it's\n");
  JobRun missing = Run({"/no/such/tool", "x"});
  EXPECT_EQ(missing.exited.exec_errno, ENOENT);
  EXPECT_EQ(missing.exited.exec_stage, "exec");
  EXPECT_FALSE(missing.exited.started);
  uid_t job_uid = config_.host_id_base + 1;
  JobRun bg = RunShell("sleep 1000 & echo bg");
  EXPECT_EQ(bg.out, "bg\n");
  EXPECT_EQ(CountProcessesOfUid(job_uid), 0);
}

// A bash template's mother is a warm bash with the nursery library preloaded, as a sh
// template's is a dash: each job's shell is a clone of her that starts bash's own main.
class BashZygoteTest : public SandboxTest {
 protected:
  const char* Runtime() const override { return "bash"; }
};

TEST_F(BashZygoteTest, JobsRunInACloneOfTheWarmBash) {
  if (!NurseryApplies(config_) || !OpenNurseryLibrary()) GTEST_SKIP() << "no shell nursery in this build";
  for (int i = 0; i < 3; ++i) {
    JobRun r = RunShell("a=(x y z); echo ${#a[@]} ${a[1]} $0 $(cat /proc/$$/comm) $(readlink /proc/$$/exe); "
                        "grep -q libsandpool_nursery /proc/$$/maps && echo preloaded; "
                        "env | grep -c '^LD_'; tr '\\0' '\\n' < /proc/$$/environ | grep -c -E '^(LD_|$)'; "
                        "id -u; exit 5");
    EXPECT_EQ(r.out, "3 y bash bash /usr/bin/bash\npreloaded\n0\n0\n1000\n") << r.err;
    ASSERT_TRUE(r.exited.have_status);
    EXPECT_EQ(WEXITSTATUS(r.exited.wait_status), 5);
  }
}

class PythonZygoteTest : public SandboxTest {
 protected:
  const char* Runtime() const override { return "python"; }
};

TEST_F(PythonZygoteTest, CodeRunsLikePythonDashC) {
  JobRun r = RunCode("import json, sys\nprint(json.dumps({'a': [1, 2]}))\nprint(sys.argv)");
  EXPECT_EQ(r.out, "{\"a\": [1, 2]}\n['-c']\n");
  EXPECT_EQ(WEXITSTATUS(r.exited.wait_status), 0);
  // A fresh __main__: nothing of the zygote is visible.
  JobRun g = RunCode("print(sorted(k for k in globals() if not k.startswith('__')))");
  EXPECT_EQ(g.out, "[]\n");
  JobRun exc = RunCode("def f():\n    raise ValueError('boom')\nf()");
  EXPECT_EQ(WEXITSTATUS(exc.exited.wait_status), 1);
  EXPECT_NE(exc.err.find("ValueError: boom"), std::string::npos) << exc.err;
  EXPECT_NE(exc.err.find("line 3"), std::string::npos) << exc.err;
  EXPECT_EQ(exc.err.find("_sandpool_zygote"), std::string::npos) << exc.err;
  JobRun code = RunCode("import sys; sys.exit(7)");
  EXPECT_EQ(WEXITSTATUS(code.exited.wait_status), 7);
  JobRun msg = RunCode("raise SystemExit('bye')");
  EXPECT_EQ(WEXITSTATUS(msg.exited.wait_status), 1);
  EXPECT_EQ(msg.err, "bye\n");
  // What a normal interpreter exit does still happens: atexit handlers, threads, flushing.
  JobRun tidy = RunCode(
      "import atexit, threading, time, sys\n"
      "atexit.register(lambda: print('atexit ran'))\n"
      "threading.Thread(target=lambda: (time.sleep(0.05), print('thread done'))).start()\n"
      "sys.stdout.write('no newline')");
  EXPECT_EQ(tidy.out, "no newlinethread done\natexit ran\n");
  JobRun stdin_job = RunCode("import sys, os; print(sys.stdin.read().upper(), os.getcwd(), os.environ['HOME'])", "abc");
  EXPECT_EQ(stdin_job.out, "ABC /work /work\n");
  JobRun fds = RunCode("import os; print([f for f in os.listdir('/proc/self/fd') if f not in '0 1 2'.split()])");
  EXPECT_EQ(fds.out, "['3']\n") << "only listdir's own fd besides stdio";
}

// `/usr/bin/python3 -c code` on the host, from /, with an empty environment: its exit status,
// stdout and stderr, for comparing a job with what the interpreter itself does.
struct HostRun {
  int status = -1;
  std::string out, err;
};
HostRun RunHostPython(const std::string& code) {
  HostRun r;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return r;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ::dup2(null, 0);
    if (::chdir("/") != 0) ::_exit(125);
    const char* argv[] = {"/usr/bin/python3", "-c", code.c_str(), nullptr};
    const char* envp[] = {nullptr};
    ::execve(argv[0], const_cast<char**>(argv), const_cast<char**>(envp));
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  // Small outputs: both fit a pipe, so reading one after the other cannot block the child.
  for (auto [fd, dst] : {std::pair{err[0], &r.err}, std::pair{out[0], &r.out}}) {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) dst->append(buf, static_cast<size_t>(n));
    ::close(fd);
  }
  ::waitpid(pid, &r.status, 0);
  return r;
}

// An exception the job does not catch is shown exactly as python3 -c shows it (the zygote hands
// it to sys.excepthook, as the interpreter does, and shows none of its own frames), with the
// same exit status: plain, chained and context exceptions, syntax errors, a group, a suggestion;
// the job's own hook, one that raises, one deleted; what an atexit callback or a thread raises;
// and a job that breaks its own streams (stderr None, fd 1 or 2 closed, sys.stdout closed).
TEST_F(PythonZygoteTest, UncaughtExceptionsAreShownAsPythonDashCShowsThem) {
  const char* codes[] = {
      "def f():\n    raise ValueError('boom')\nf()",
      "try:\n    1 / 0\nexcept Exception as e:\n    raise KeyError('k') from e",
      "try:\n    [][1]\nexcept IndexError:\n    int('x')",
      "x = = 1",
      "def g(\n",
      "raise ExceptionGroup('eg', [ValueError(1), TypeError('t')])",
      "prnt(1)",
      "import sys\nsys.excepthook = lambda t, v, tb: print('hook', t.__name__, v)\nraise OSError(2, 'gone')",
      "import sys\ndef h(*a):\n    raise RuntimeError('in hook')\nsys.excepthook = h\nraise OSError(2, 'gone')",
      "import atexit\natexit.register(lambda: 1 / 0)\nprint('ran')",
      "import sys\ndel sys.excepthook\nraise OSError(2, 'gone')",
      "import threading\ndef t():\n    raise ValueError('in thread')\nthreading.Thread(target=t).start()",
      "import sys\nsys.stderr = None\nprint('out')\nraise OSError(2, 'gone')",
      "import os, sys\nsys.excepthook = lambda *a: os.close(2) or sys.stderr.write('x')\nraise OSError(2, 'gone')",
      "import os\nprint('never shown', end='')\nos.close(1)",
      "import sys\nsys.stdout.close()\nraise OSError(2, 'gone')",
  };
  for (const char* code : codes) {
    HostRun host = RunHostPython(code);
    ASSERT_TRUE(WIFEXITED(host.status)) << code;
    JobRun job = RunCode(code);
    ASSERT_TRUE(job.exited.have_status) << code;
    EXPECT_EQ(WEXITSTATUS(job.exited.wait_status), WEXITSTATUS(host.status)) << code;
    // Objects' addresses differ between two processes (an atexit callback is shown by its repr).
    static const std::regex kAddress("0x[0-9a-f]+");
    EXPECT_EQ(std::regex_replace(job.err, kAddress, "0x"), std::regex_replace(host.err, kAddress, "0x")) << code;
    EXPECT_EQ(job.out, host.out) << code;
  }
}

TEST_F(PythonZygoteTest, ArgvJobsAreExecd) {
  JobRun r = Run({"sh", "-c", "echo from sh $0"});
  EXPECT_EQ(r.out, "from sh sh\n");
  JobRun missing = Run({"no-such-program"});
  EXPECT_EQ(missing.exited.exec_errno, ENOENT);
}

// Python sandboxes come from the slot's nursery (worker/runners/nursery.h) when the library is built
// (not in sanitizer builds, where the tests above run the interpreter-per-sandbox path).
class NurseryTest : public PythonZygoteTest {
 protected:
  void SetUp() override {
    if (!OpenNurseryLibrary()) GTEST_SKIP() << "no nursery library next to the test binary (sanitizer build)";
    PythonZygoteTest::SetUp();
  }
  static std::string Cmdline(pid_t pid) { return ProcFile(pid, "cmdline"); }
  static bool IsNursery(pid_t pid) {
    std::string c = Cmdline(pid);
    return c.size() > 8 && c.compare(c.size() - 8, 8, std::string("\0mother\0", 8)) == 0;
  }
  // The slot's mother: a nursery process (sandbox root's uid) whose parent is not one.
  pid_t MotherPid() {
    pid_t found = -1;
    DIR* d = ::opendir("/proc");
    while (struct dirent* e = ::readdir(d)) {
      struct stat st;
      std::string p = std::string("/proc/") + e->d_name;
      if (e->d_name[0] < '0' || e->d_name[0] > '9' || ::stat(p.c_str(), &st) != 0 || st.st_uid != config_.host_id_base) continue;
      pid_t pid = std::atoi(e->d_name);
      if (IsNursery(pid) && !IsNursery(ParentPid(pid))) found = pid;
    }
    ::closedir(d);
    return found;
  }
};

TEST_F(NurseryTest, EachJobIsAFreshCloneThatSharesNothing) {
  // pid 1 of the job's sandbox is a clone of the mother; the job sees only itself and it.
  JobRun a = RunCode(
      "import json, os\n"
      "json.marker = 1\n"
      "open('/work/a', 'w').write('x')\n"
      "os.environ['LEFT'] = 'behind'\n"
      "print(open('/proc/1/cmdline', 'rb').read().split(b'\\0')[-2].decode(), sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))");
  EXPECT_EQ(a.out, "mother [1, 2]\n") << a.err;
  pid_t mother = MotherPid();
  ASSERT_GT(mother, 0);
  JobRun b = RunCode("import json, os\nprint(hasattr(json, 'marker'), os.path.exists('/work/a'), 'LEFT' in os.environ)");
  EXPECT_EQ(b.out, "False False False\n") << b.err;
  EXPECT_EQ(MotherPid(), mother) << "one mother serves the slot";
  // None of the mother's mounts but her /proc is copied into the sandbox (rootfs.h,
  // MountMotherFilesystems): /proc is the keeper's bind, the mother's and the sandbox's own.
  JobRun m = RunCode(
      "import collections\n"
      "n = collections.Counter(l.split()[4] for l in open('/proc/self/mountinfo'))\n"
      "print(sorted((p, c) for p, c in n.items() if c > 1))");
  EXPECT_EQ(m.out, "[('/proc', 3)]\n") << m.err;
  // Confined like every job: uid 1000, no capabilities, no_new_privs, seccomp; dumpable as after
  // an exec (its /proc/self is its own).
  JobRun c = RunCode(
      "import os\n"
      "s = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n"
      "print(os.getuid(), s['CapEff'], s['CapBnd'], s['NoNewPrivs'], s['Seccomp'], s['Seccomp_filters'], len(open('/proc/self/environ','rb').read()) > 0)");
  // Two filters: the mother's, inherited, and the job's small one over it (seccomp_policy.h).
  EXPECT_EQ(c.out, "1000 0000000000000000 0000000000000000 1 2 2 True\n") << c.err;
  // The OOM killer's first choice is the job, not init (whose death would take the mother).
  EXPECT_EQ(RunCode("print(open('/proc/self/oom_score_adj').read().strip(), open('/proc/1/oom_score_adj').read().strip())").out,
            "1000 0\n");
  // A fresh python3's signal dispositions.
  JobRun sig = RunCode("import signal\nprint(signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN, signal.getsignal(signal.SIGINT) is signal.default_int_handler)");
  EXPECT_EQ(sig.out, "True True\n");
}

TEST_F(NurseryTest, TheMemoryLimitKillsTheJobNotTheMother) {
  JobRun first = RunCode("print('warm')");
  pid_t mother = MotherPid();
  ASSERT_GT(mother, 0);
  JobRun mem = RunCode("b = bytearray(900 * 1024 * 1024); print(len(b))");
  EXPECT_GT(mem.exited.oom_kills, 0u) << mem.out << mem.err;
  JobRun after = RunCode("print('still here')");
  EXPECT_EQ(after.out, "still here\n");
  EXPECT_EQ(MotherPid(), mother);
  JobRun killed = Run({}, "", true, "code", "import time\nprint('before', flush=True)\ntime.sleep(1000)");
  EXPECT_TRUE(killed.exited.killed);
  EXPECT_EQ(RunCode("print('next')").out, "next\n");
  EXPECT_EQ(MotherPid(), mother);
}

TEST_F(NurseryTest, AMotherThatStopsAnsweringIsReplaced) {
  EXPECT_EQ(RunCode("print('warm')").out, "warm\n");
  uint64_t ready = WaitReady();  // the next sandbox, prepared before the mother stops
  ASSERT_GT(ready, 0u);
  pid_t mother = MotherPid();
  ASSERT_GT(mother, 0);
  ASSERT_EQ(::kill(mother, SIGSTOP), 0);
  // That sandbox still serves; the next preparation finds the mother wedged, fails once (after
  // its 10 s wait), and the keeper starts a new mother.
  EXPECT_EQ(Run({}, "", false, "code", "print('prepared before')", ready).out, "prepared before\n");
  int failed = 0;
  for (;;) {
    auto f = keeper_.Receive();
    ASSERT_TRUE(f.ok()) << f.status().message();
    if (f->type == static_cast<uint16_t>(MsgType::kFailed)) {
      FailedMsg m;
      ASSERT_TRUE(Decode(f->payload, &m).ok());
      EXPECT_NE(m.message.find("did not answer"), std::string::npos) << m.message;
      ++failed;
      continue;
    }
    if (f->type != static_cast<uint16_t>(MsgType::kReady)) continue;
    ReadyMsg r;
    ASSERT_TRUE(Decode(f->payload, &r).ok());
    stdin_ = std::move(f->fds[0]);
    stdout_ = std::move(f->fds[1]);
    stderr_ = std::move(f->fds[2]);
    RunMsg run;
    run.generation = r.generation;
    run.kind = "code";
    run.code = "print('new mother')";
    run.env = {"PATH=/usr/bin:/bin", "HOME=/work"};
    run.cwd = "/work";
    ASSERT_TRUE(keeper_.Send(static_cast<uint16_t>(MsgType::kRun), Encode(run)).ok());
    stdin_.reset();
    break;
  }
  EXPECT_EQ(failed, 1);
  EXPECT_EQ(ReadAll(stdout_.get()), "new mother\n");
  pid_t replaced = MotherPid();
  EXPECT_GT(replaced, 0);
  EXPECT_NE(replaced, mother);
  EXPECT_NE(::kill(mother, 0), 0) << "the stopped mother was killed";
}

class NodeZygoteTest : public SandboxTest {
 protected:
  const char* Runtime() const override { return "node"; }
  void SetUp() override {
    if (::access("/usr/bin/node", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/node";
    SandboxTest::SetUp();
  }
};

TEST_F(NodeZygoteTest, CodeRunsLikeNodeDashE) {
  JobRun r = RunCode("const p = require('path'); console.log(p.join('a', 'b'), process.cwd()); setTimeout(() => console.log('later'), 10)");
  EXPECT_EQ(r.out, "a/b /work\nlater\n");
  JobRun exc = RunCode("throw new Error('boom')");
  EXPECT_EQ(WEXITSTATUS(exc.exited.wait_status), 1);
  EXPECT_NE(exc.err.find("Error: boom"), std::string::npos) << exc.err;
  JobRun code = RunCode("process.exitCode = 4");
  EXPECT_EQ(WEXITSTATUS(code.exited.wait_status), 4);
}

// Template layers: setup's output, owned on the host by the build slot's users, is the lower
// layer of a per-sandbox overlay. A job may change it; nobody else sees the change.
class LayerTest : public SandboxTest {
 protected:
  static constexpr uint32_t kBuildSlot = 5;
  void Configure(SandboxConfig& c) override {
    dir_ = "/tmp/sandpool-layer-test-" + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    layer_ = dir_ + "/layer";
    const uid_t owner = c.host_id_base + 2 * kBuildSlot + 1;  // the build's job user
    ASSERT_TRUE(std::filesystem::create_directories(layer_ + "/lib"));
    std::ofstream(layer_ + "/greeting") << "hello\n";
    std::ofstream(layer_ + "/lib/mod.txt") << "module\n";
    for (const char* p : {"", "/lib", "/greeting", "/lib/mod.txt"}) {
      ASSERT_EQ(::chown((layer_ + p).c_str(), owner, owner), 0) << p;
    }
    c.layer_host_dir = layer_;
    c.layer_owner_base = c.host_id_base + 2 * kBuildSlot;
    c.upper_bytes = 2 << 20;
  }
  void TearDown() override {
    SandboxTest::TearDown();
    std::filesystem::remove_all(dir_);
  }
  static std::string Slurp(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  std::string dir_, layer_;
};

TEST_F(LayerTest, JobsChangeTheLayerCopyOnWrite) {
  JobRun a = Run({"/bin/sh", "-c",
                  "cat /opt/greeting; echo more >> /opt/greeting; echo new > /opt/lib/new; rm /opt/lib/mod.txt; "
                  "stat -c '%u:%g' /opt /opt/greeting; cat /opt/greeting; ls /opt/lib"});
  EXPECT_EQ(a.out, "hello\n1000:1000\n1000:1000\nhello\nmore\nnew\n") << a.err;
  EXPECT_FALSE(a.exited.disk_full);
  JobRun b = Run({"/bin/sh", "-c", "cat /opt/greeting; ls /opt/lib; ls -A /.sandpool/cow | wc -l"});
  EXPECT_EQ(b.out, "hello\nmod.txt\n0\n") << b.err;
  // The host's layer is untouched.
  EXPECT_EQ(Slurp(layer_ + "/greeting"), "hello\n");
  EXPECT_TRUE(std::filesystem::exists(layer_ + "/lib/mod.txt"));
  EXPECT_FALSE(std::filesystem::exists(layer_ + "/lib/new"));
}

TEST_F(LayerTest, UpperLayerIsSizeCapped) {
  JobRun r = Run({"/bin/sh", "-c", "head -c 8000000 /dev/zero > /opt/big; echo rc=$?"});
  EXPECT_NE(r.out, "rc=0\n");
  EXPECT_NE(r.err.find("No space left"), std::string::npos) << r.err;
  EXPECT_TRUE(r.exited.disk_full);
  JobRun next = Run({"/bin/sh", "-c", "test -e /opt/big && echo LEAK; cat /opt/greeting"});
  EXPECT_EQ(next.out, "hello\n");
}

// A prepared root directory instead of the host's: a tiny image of the host's dash and libc,
// with a home owned by the image's user 1000.
class PreparedRootTest : public LayerTest {
 protected:
  void Configure(SandboxConfig& c) override {
    const char* const files[] = {"/bin/dash", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"};
    for (const char* f : files) {
      if (::access(f, R_OK) != 0) GTEST_SKIP() << "no " << f << " to build a test image from";
    }
    dir_ = "/tmp/sandpool-root-test-" + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    root_ = dir_ + "/root";
    for (const char* d : {"/bin", "/lib/x86_64-linux-gnu", "/lib64", "/etc", "/home/sandbox"}) {
      ASSERT_TRUE(std::filesystem::create_directories(root_ + d));
    }
    for (const char* f : files) std::filesystem::copy_file(f, root_ + f);
    std::filesystem::create_symlink("dash", root_ + "/bin/sh");
    std::ofstream(root_ + "/etc/image-id") << "test-image\n";
    ASSERT_EQ(::chown((root_ + "/home/sandbox").c_str(), 1000, 1000), 0);
    c.root_dir = root_;
  }
  std::string root_;
};

TEST_F(PreparedRootTest, ImageIsTheRootCopyOnWrite) {
  JobRun a = Run({"/bin/sh", "-c",
                  "read id < /etc/image-id; echo $id; test -e /usr/bin/python3 && echo HOST-USR; "
                  "echo x > /home/sandbox/f && echo home-ok; (echo y > /etc/x) 2>/dev/null || echo etc-denied; "
                  "read h < /etc/hostname; echo $h; test -r /proc/self/status && echo proc-ok; "
                  "echo w > /work/w && echo work-ok; test -c /dev/null && echo dev-ok; test -e /.old && echo OLD-ROOT"});
  EXPECT_EQ(a.out, "test-image\nhome-ok\netc-denied\nsandbox\nproc-ok\nwork-ok\ndev-ok\n") << a.err;
  JobRun b = Run({"/bin/sh", "-c", "test -e /home/sandbox/f && echo LEAK; echo end"});
  EXPECT_EQ(b.out, "end\n");
  EXPECT_FALSE(std::filesystem::exists(root_ + "/home/sandbox/f"));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/etc/hostname")) << "the sandbox's names live in its upper layer";
}

class PreparedRootShZygoteTest : public PreparedRootTest {
 protected:
  const char* Runtime() const override { return "sh"; }
};

TEST_F(PreparedRootShZygoteTest, WarmShellIsTheImagesShell) {
  JobRun r = RunShell("read id < /etc/image-id; echo $id $(pwd)");
  EXPECT_EQ(r.out, "test-image /work\n") << r.err;
}

}  // namespace
}  // namespace sandpool
