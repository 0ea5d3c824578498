// Tests of the sandbox seccomp policy against the real kernel. Every case forks a child that sets
// no_new_privs, loads the real filter and then either runs a workload with execve or makes one
// system call; the child reports through its exit status (an errno value, or death by SIGSYS)
// and, for workloads, its stdout. The tests run as root on purpose: a refused call must be
// refused by the filter even for a caller the kernel would otherwise let through.
#include "worker/seccomp/seccomp_policy.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/fd.h"

namespace sandpool {
namespace {

// Which filters a "filtered" child loads: the sandbox policy, or (the binary run with
// --stack=nursery, a second registration of every case) the nursery's mother filter with the
// job's over it, which must answer every case the same.
bool g_nursery_stack = false;

// `build`'s result, built once for the whole run; a build that fails ends the run.
template <typename T>
const T& BuiltOnce(Result<T> (*build)(), const char* name) {
  static const T* built = [&] {
    Result<T> r = build();
    if (!r.ok()) {
      std::fprintf(stderr, "%s: %s\n", name, r.status().message().c_str());
      std::abort();
    }
    return new T(std::move(r).value());
  }();
  return *built;
}

const SeccompProgram& Program() { return BuiltOnce(BuildSandboxSeccomp, "BuildSandboxSeccomp"); }
const NurserySeccomp& Nursery() { return BuiltOnce(BuildNurserySeccomp, "BuildNurserySeccomp"); }

// What a filtered child loads, in order.
std::vector<const SeccompProgram*> Filters() {
  if (g_nursery_stack) return {&Nursery().mother, &Nursery().job};
  return {&Program()};
}

struct ChildResult {
  int status = 0;   // raw wait status
  std::string out;  // the child's stdout
};

// Forks; the child loads `progs` in order after PR_SET_NO_NEW_PRIVS, then runs `body`, whose
// return value becomes the exit code. Exit code 200/201 mean the set-up itself failed.
ChildResult RunChild(const std::vector<const SeccompProgram*>& progs, const std::function<int()>& body) {
  ChildResult res;
  Result<PipePair> pipe = MakePipe();
  if (!pipe.ok()) {
    ADD_FAILURE() << pipe.status().message();
    return res;
  }
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    return res;
  }
  if (pid == 0) {
    dup2(pipe->write.get(), STDOUT_FILENO);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(200);
    for (const SeccompProgram* prog : progs) {
      if (LoadSeccompProgram(*prog) != 0) _exit(201);
    }
    int code = body();
    std::fflush(stdout);
    _exit(code);
  }
  pipe->write.reset();
  char buf[4096];
  for (;;) {
    ssize_t n = read(pipe->read.get(), buf, sizeof buf);
    if (n > 0) {
      res.out.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  while (waitpid(pid, &res.status, 0) < 0 && errno == EINTR) {
  }
  return res;
}

ChildResult RunFiltered(const std::function<int()>& body) { return RunChild(Filters(), body); }

// Runs argv[0] under the filter with a small, fixed environment.
ChildResult Exec(std::vector<std::string> argv, std::vector<std::string> env = {}) {
  env.push_back("PATH=/usr/bin:/bin");
  env.push_back("HOME=/tmp");
  env.push_back("LANG=C.UTF-8");
  return RunFiltered([&] {
    std::vector<char*> a, e;
    for (auto& s : argv) a.push_back(s.data());
    for (auto& s : env) e.push_back(s.data());
    a.push_back(nullptr);
    e.push_back(nullptr);
    execve(a[0], a.data(), e.data());
    return 127;
  });
}

std::string Describe(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

#define EXPECT_EXIT_CODE(res, code) \
  EXPECT_TRUE(WIFEXITED((res).status) && WEXITSTATUS((res).status) == (code)) \
      << Describe((res).status) << "; stdout: " << (res).out

// The errno a raw system call left, or 0 if it succeeded: the child's exit code.
int ErrnoOf(long rc) { return rc == -1 ? errno : 0; }

// Runs one raw system call in a filtered child and returns the errno it failed with (0: it
// succeeded; -1: the child did not exit normally, e.g. it was killed).
int FilteredErrno(const std::function<long()>& call) {
  ChildResult r = RunFiltered([&] { return ErrnoOf(call()); });
  if (!WIFEXITED(r.status)) return -1;
  return WEXITSTATUS(r.status);
}

bool HaveNode() { return access("/usr/bin/node", X_OK) == 0; }

// ---------------------------------------------------------------------------------------------
// Building and loading
// ---------------------------------------------------------------------------------------------

TEST(SeccompBuild, BuildsAndReportsTimes) {
  constexpr int kRounds = 5;
  int64_t best = INT64_MAX, total = 0;
  size_t len = 0;
  for (int i = 0; i < kRounds; ++i) {
    int64_t t0 = MonotonicUs();
    Result<SeccompProgram> r = BuildSandboxSeccomp();
    int64_t dt = MonotonicUs() - t0;
    ASSERT_TRUE(r.ok()) << r.status().message();
    len = r->filter.size();
    best = std::min(best, dt);
    total += dt;
  }
  EXPECT_GT(len, 10u);
  EXPECT_LE(len, static_cast<size_t>(BPF_MAXINSNS));

  // Load time, measured inside children (a load cannot be undone in this process).
  int64_t load_best = INT64_MAX;
  const SeccompProgram& prog = Program();  // built here, outside the timed region
  for (int i = 0; i < kRounds; ++i) {
    ChildResult r = RunChild({}, [&prog] {
      int64_t t0 = MonotonicUs();
      int err = LoadSeccompProgram(prog);
      int64_t dt = MonotonicUs() - t0;
      std::printf("%lld", static_cast<long long>(dt));
      return err;
    });
    ASSERT_EQ(r.status, 0) << Describe(r.status);
    load_best = std::min(load_best, static_cast<int64_t>(std::stoll(r.out)));
  }
  // The nursery job's load, over the mother's filter (loaded untimed first).
  int64_t job_best = INT64_MAX;
  const NurserySeccomp& n = Nursery();
  for (int i = 0; i < kRounds; ++i) {
    ChildResult r = RunChild({&n.mother}, [&n] {
      int64_t t0 = MonotonicUs();
      int err = LoadSeccompProgram(n.job);
      int64_t dt = MonotonicUs() - t0;
      std::printf("%lld", static_cast<long long>(dt));
      return err;
    });
    ASSERT_EQ(r.status, 0) << Describe(r.status);
    job_best = std::min(job_best, static_cast<int64_t>(std::stoll(r.out)));
  }
  std::printf("[ timing ] BuildSandboxSeccomp: best %lld us, mean %lld us; program %zu insns; "
              "LoadSeccompProgram: best %lld us; a nursery job's (%zu insns, over the mother's %zu): best %lld us\n",
              static_cast<long long>(best), static_cast<long long>(total / kRounds), len,
              static_cast<long long>(load_best), n.job.filter.size(), n.mother.filter.size(),
              static_cast<long long>(job_best));
}

TEST(SeccompBuild, DeterministicOutput) {
  Result<SeccompProgram> a = BuildSandboxSeccomp();
  Result<SeccompProgram> b = BuildSandboxSeccomp();
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->filter.size(), b->filter.size());
  EXPECT_EQ(0, std::memcmp(a->filter.data(), b->filter.data(),
                           a->filter.size() * sizeof(struct sock_filter)));
}

// The nursery's mother filter lets a mother build sandboxes (namespaces, mounts, a hostname); the
// job's filter over it takes exactly that away again. (Every other case of this file runs
// against that stack too: --stack=nursery.)
TEST(SeccompNursery, TheMotherBuildsSandboxesAndTheJobOverHerCannot) {
  const NurserySeccomp& n = Nursery();
  EXPECT_LT(n.job.filter.size() * 4, Program().filter.size()) << "the job's load is the small one";
  auto make_sandbox = [] {
    if (ErrnoOf(unshare(CLONE_NEWNS | CLONE_NEWUTS)) != 0) return 10 + errno;
    if (ErrnoOf(sethostname("x", 1)) != 0) return 30 + errno;
    if (ErrnoOf(mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr)) != 0) return 50 + errno;
    if (ErrnoOf(umount2("/nonexistent-sandpool", 0)) != ENOENT) return 70;
    long pid = syscall(SYS_clone, CLONE_NEWPID | CLONE_NEWIPC | SIGCHLD, nullptr, nullptr, nullptr, 0);
    if (pid == 0) _exit(getpid() == 1 ? 0 : 1);
    int st = 0;
    if (pid < 0 || waitpid(static_cast<pid_t>(pid), &st, 0) != pid || st != 0) return 71;
    return 0;
  };
  EXPECT_EXIT_CODE(RunChild({&n.mother}, make_sandbox), 0);
  auto refused = [] {
    int fails = 0;
    fails += ErrnoOf(unshare(CLONE_NEWUTS)) == EPERM ? 0 : 1;
    fails += ErrnoOf(sethostname("x", 1)) == EPERM ? 0 : 2;
    fails += ErrnoOf(mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr)) == EPERM ? 0 : 4;
    fails += ErrnoOf(umount2("/nonexistent-sandpool", 0)) == EPERM ? 0 : 8;
    long pid = syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, nullptr, nullptr, nullptr, 0);
    if (pid == 0) _exit(0);
    fails += pid == -1 && errno == EPERM ? 0 : 16;
    fails += ErrnoOf(syscall(SYS_clone3, nullptr, 0)) == ENOSYS ? 0 : 32;
    fails += getppid() > 0 ? 0 : 64;
    return fails;
  };
  EXPECT_EXIT_CODE(RunChild({&n.mother, &n.job}, refused), 0);
  EXPECT_EXIT_CODE(RunChild({&Program()}, refused), 0);
}

TEST(SeccompLoad, RejectsEmptyProgram) {
  SeccompProgram empty;
  EXPECT_EQ(LoadSeccompProgram(empty), EINVAL);
}

TEST(SeccompLoad, NeedsNoNewPrivsWithoutCapSysAdmin) {
  // Without no_new_privs, a caller without CAP_SYS_ADMIN is refused with EACCES; we run as
  // root, so drop to an unprivileged uid in the child first.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(202);
    _exit(LoadSeccompProgram(Program()));
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == EACCES) << Describe(status);
}

// ---------------------------------------------------------------------------------------------
// Workloads that must keep working
// ---------------------------------------------------------------------------------------------

TEST(SeccompWorkloads, ShEcho) {
  ChildResult r = Exec({"/bin/sh", "-c", "echo hi"});
  EXPECT_EXIT_CODE(r, 0);
  EXPECT_EQ(r.out, "hi\n");
}

TEST(SeccompWorkloads, BashAndCoreutils) {
  ChildResult r = Exec({"/bin/bash", "-c",
                        "a=$(echo x); echo ${a}y | cat; (exit 3); echo rc=$?; "
                        "printf 'b\\na\\n' | sort | head -1; "
                        "ls / >/dev/null && echo ls-ok; "
                        "dd if=/dev/zero bs=1k count=4 2>/dev/null | wc -c; "
                        "d=$(mktemp -d) && mkfifo $d/f && echo fifo-ok && rm -r $d; "
                        "date +%Y >/dev/null && echo date-ok; "
                        "cat /proc/self/status | grep -c Seccomp; "
                        "sleep 0.01 & wait; echo waited"});
  EXPECT_EXIT_CODE(r, 0);
  EXPECT_EQ(r.out, "xy\nrc=3\na\nls-ok\n4096\nfifo-ok\ndate-ok\n2\nwaited\n");
}

TEST(SeccompWorkloads, LsRoot) {
  ChildResult r = Exec({"/bin/ls", "/"});
  EXPECT_EXIT_CODE(r, 0);
  EXPECT_NE(r.out.find("usr\n"), std::string::npos) << r.out;
}

TEST(SeccompWorkloads, Python) {
  ChildResult r = Exec({"/usr/bin/python3", "-c", "import json,re,math,threading;print(1)"});
  EXPECT_EXIT_CODE(r, 0);
  EXPECT_EQ(r.out, "1\n");
}

TEST(SeccompWorkloads, PythonSubprocessThreadsAsyncio) {
  ChildResult r = Exec({"/usr/bin/python3", "-c",
                        "import subprocess, threading, asyncio, os, socket\n"
                        "print(subprocess.run(['/bin/sh','-c','echo sub'], capture_output=True,"
                        " text=True).stdout.strip())\n"
                        "out=[]\n"
                        "ts=[threading.Thread(target=out.append, args=(i,)) for i in range(4)]\n"
                        "[t.start() for t in ts]; [t.join() for t in ts]\n"
                        "print(sorted(out))\n"
                        "async def main():\n"
                        "  p = await asyncio.create_subprocess_exec('/bin/echo','aio',"
                        " stdout=asyncio.subprocess.PIPE)\n"
                        "  o,_ = await p.communicate(); return o.decode().strip()\n"
                        "print(asyncio.run(main()))\n"
                        "a,b = socket.socketpair(); a.send(b'x'); print(b.recv(1))\n"
                        "print(len(socket.if_nameindex()) >= 1)\n"});
  EXPECT_EXIT_CODE(r, 0);
  EXPECT_EQ(r.out, "sub\n[0, 1, 2, 3]\naio\nb'x'\nTrue\n");
}

TEST(SeccompWorkloads, PythonMultiprocessing) {
  ChildResult r = Exec({"/usr/bin/python3", "-c",
                        "import multiprocessing as mp\n"
                        "def f(x): return x*x\n"
                        "if __name__ == '__main__':\n"
                        "  with mp.Pool(2) as p: print(p.map(f, [1,2,3]))\n"
                        "  q = mp.get_context('spawn').Queue(); q.put(5); print(q.get())\n"});
  EXPECT_EXIT_CODE(r, 0);
  EXPECT_EQ(r.out, "[1, 4, 9]\n5\n");
}

TEST(SeccompWorkloads, NodeHello) {
  if (!HaveNode()) GTEST_SKIP() << "no /usr/bin/node";
  ChildResult r = Exec({"/usr/bin/node", "-e", "console.log(1)"});
  EXPECT_EXIT_CODE(r, 0);
  EXPECT_EQ(r.out, "1\n");
}

// Async fs, the thread pool, worker threads, child processes and netlink (networkInterfaces).
// UV_USE_IO_URING=1 makes libuv try io_uring first; it must fall back when that is refused.
TEST(SeccompWorkloads, NodeIoUringFallbackWorkersChildProcess) {
  if (!HaveNode()) GTEST_SKIP() << "no /usr/bin/node";
  const char* script =
      "const fs=require('fs'), cp=require('child_process'), os=require('os');"
      "const {Worker}=require('worker_threads');"
      // A file of its own: ctest runs this case for both filters at once (nursery.*).
      "const f='/tmp/sandpool-seccomp-node-'+process.pid+'.txt';"
      "fs.writeFileSync(f,'abc');"
      "fs.readFile(f,'utf8',(e,d)=>{"
      "  if(e) throw e; console.log('read', d);"
      "  fs.promises.stat('/tmp').then(s=>{"
      "    console.log('dir', s.isDirectory());"
      "    console.log(cp.execSync('echo child').toString().trim());"
      "    console.log('ifaces', typeof os.networkInterfaces());"
      "    const w=new Worker('require(\"worker_threads\").parentPort.postMessage(42)',{eval:true});"
      "    w.on('message',m=>{console.log('worker',m); fs.unlinkSync(f);});"
      "  });"
      "});";
  for (const char* uring : {"UV_USE_IO_URING=1", "UV_USE_IO_URING=0"}) {
    ChildResult r = Exec({"/usr/bin/node", "-e", script}, {uring});
    EXPECT_EXIT_CODE(r, 0);
    EXPECT_EQ(r.out, "read abc\ndir true\nchild\nifaces object\nworker 42\n") << uring;
  }
}

TEST(SeccompWorkloads, ForkAndThreadsInProcess) {
  ChildResult r = RunFiltered([] {
    pid_t pid = fork();
    if (pid < 0) return 10;
    if (pid == 0) _exit(7);
    int st = 0;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 7) return 11;
    int value = 0;
    std::thread t([&value] { value = 42; });
    t.join();
    if (value != 42) return 12;
    return 0;
  });
  EXPECT_EXIT_CODE(r, 0);
}

// ---------------------------------------------------------------------------------------------
// Refused system calls
// ---------------------------------------------------------------------------------------------

struct DeniedCase {
  const char* name;
  std::function<long()> call;  // harmless arguments: unfiltered, root would get another error
};

std::vector<DeniedCase> DeniedCases() {
  static char buf[16];
  return {
      {"mount", [] { return syscall(SYS_mount, "none", "/nonexistent-sp", "tmpfs", 0, nullptr); }},
      {"umount2", [] { return syscall(SYS_umount2, "/nonexistent-sp", 0); }},
      {"pivot_root", [] { return syscall(SYS_pivot_root, "/nonexistent-sp", "/nonexistent-sp"); }},
      {"setns", [] { return syscall(SYS_setns, -1, 0); }},
      {"unshare", [] { return syscall(SYS_unshare, 0); }},
      {"chroot", [] { return syscall(SYS_chroot, "/nonexistent-sp"); }},
      {"keyctl", [] { return syscall(SYS_keyctl, 0 /*GET_KEYRING_ID*/, -3 /*session*/, 0); }},
      {"add_key", [] { return syscall(SYS_add_key, "sandpool-bogus", "d", nullptr, 0, -3); }},
      {"request_key", [] { return syscall(SYS_request_key, "sandpool-bogus", "d", nullptr, -3); }},
      {"bpf", [] { return syscall(SYS_bpf, 0, nullptr, 0); }},
      {"perf_event_open", [] { return syscall(SYS_perf_event_open, nullptr, 0, -1, -1, 0); }},
      {"userfaultfd", [] { return syscall(SYS_userfaultfd, O_CLOEXEC); }},
      {"kexec_load", [] { return syscall(SYS_kexec_load, 0, 0, nullptr, 0xdead0000UL); }},
      {"kexec_file_load", [] { return syscall(SYS_kexec_file_load, -1, -1, 0, nullptr, 0xdead0000UL); }},
      {"init_module", [] { return syscall(SYS_init_module, nullptr, 0, ""); }},
      {"finit_module", [] { return syscall(SYS_finit_module, -1, "", 0); }},
      {"delete_module", [] { return syscall(SYS_delete_module, "sandpool_bogus", O_NONBLOCK); }},
      {"open_by_handle_at", [] { return syscall(SYS_open_by_handle_at, -1, nullptr, 0); }},
      {"name_to_handle_at", [] { return syscall(SYS_name_to_handle_at, AT_FDCWD, "/", nullptr, nullptr, 0); }},
      {"syslog", [] { return syscall(SYS_syslog, 10 /*SIZE_BUFFER*/, nullptr, 0); }},
      {"acct", [] { return syscall(SYS_acct, "/nonexistent-sp/x"); }},
      {"swapon", [] { return syscall(SYS_swapon, "/nonexistent-sp", 0); }},
      {"swapoff", [] { return syscall(SYS_swapoff, "/nonexistent-sp"); }},
      {"reboot", [] { return syscall(SYS_reboot, 0, 0, 0, nullptr); }},  // bad magic: EINVAL
      {"settimeofday", [] { return syscall(SYS_settimeofday, nullptr, nullptr); }},
      {"clock_settime", [] { return syscall(SYS_clock_settime, 12345, nullptr); }},
      {"clock_adjtime", [] { return syscall(SYS_clock_adjtime, 12345, nullptr); }},
      {"adjtimex", [] { return syscall(SYS_adjtimex, nullptr); }},
      {"ptrace", [] { return syscall(SYS_ptrace, 16 /*ATTACH*/, -1, nullptr, nullptr); }},
      {"process_vm_readv", [] { return syscall(SYS_process_vm_readv, getpid(), nullptr, 0, nullptr, 0, 0); }},
      {"process_vm_writev", [] { return syscall(SYS_process_vm_writev, getpid(), nullptr, 0, nullptr, 0, 0); }},
      {"io_uring_setup", [] { return syscall(SYS_io_uring_setup, 1, buf); }},
      {"io_uring_enter", [] { return syscall(SYS_io_uring_enter, -1, 0, 0, 0, nullptr, 0); }},
      {"io_uring_register", [] { return syscall(SYS_io_uring_register, -1, 0, nullptr, 0); }},
      {"personality(PER_LINUX32)", [] { return syscall(SYS_personality, 0x0008UL); }},
      {"personality(ADDR_NO_RANDOMIZE)", [] { return syscall(SYS_personality, 0x0040000UL); }},
      {"socket(AF_PACKET)", [] { return syscall(SYS_socket, AF_PACKET, SOCK_RAW, 0); }},
      {"socket(AF_VSOCK)", [] { return syscall(SYS_socket, AF_VSOCK, SOCK_STREAM, 0); }},
      {"socket(AF_KEY)", [] { return syscall(SYS_socket, AF_KEY, SOCK_RAW, 2); }},
      {"socket(AF_ALG)", [] { return syscall(SYS_socket, AF_ALG, SOCK_SEQPACKET, 0); }},
      {"socket(NETLINK_AUDIT)", [] { return syscall(SYS_socket, AF_NETLINK, SOCK_RAW, NETLINK_AUDIT); }},
      {"socket(NETLINK_NETFILTER)", [] { return syscall(SYS_socket, AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER); }},
      // High bits must not smuggle a refused family past the filter (the kernel ignores them).
      {"socket(AF_PACKET|1<<32)", [] { return syscall(SYS_socket, AF_PACKET | (1UL << 32), SOCK_RAW, 0); }},
      {"socketpair(AF_INET)", [] { int sv[2]; return syscall(SYS_socketpair, AF_INET, SOCK_STREAM, 0, sv); }},
      {"mknod(char dev)", [] { return syscall(SYS_mknod, "/nonexistent-sp/d", S_IFCHR | 0600, makedev(1, 3)); }},
      {"mknodat(block dev)", [] { return syscall(SYS_mknodat, AT_FDCWD, "/nonexistent-sp/d", S_IFBLK | 0600, makedev(7, 0)); }},
      {"iopl", [] { return syscall(SYS_iopl, 3); }},
      {"modify_ldt", [] { return syscall(SYS_modify_ldt, 0, buf, sizeof buf); }},
      {"fanotify_init", [] { return syscall(SYS_fanotify_init, 0, 0); }},
      {"sethostname", [] { return syscall(SYS_sethostname, "x", 1); }},
      {"pidfd_getfd", [] { return syscall(SYS_pidfd_getfd, -1, 0, 0); }},
      {"kcmp", [] { return syscall(SYS_kcmp, getpid(), getpid(), 0, 0, 0); }},
      {"io_setup", [] { return syscall(SYS_io_setup, 1, buf); }},
      {"set_mempolicy", [] { return syscall(SYS_set_mempolicy, 0, nullptr, 0); }},
      {"open_tree", [] { return syscall(SYS_open_tree, -1, "/", 0); }},
      {"fsopen", [] { return syscall(SYS_fsopen, "tmpfs", 0); }},
      {"quotactl", [] { return syscall(SYS_quotactl, 0, nullptr, 0, nullptr); }},
      {"unknown syscall 1000", [] { return syscall(1000); }},
  };
}

TEST(SeccompDenied, EachReturnsEperm) {
  for (const DeniedCase& c : DeniedCases()) {
    EXPECT_EQ(FilteredErrno(c.call), EPERM) << c.name;
  }
}

TEST(SeccompDenied, TiocstiAndTioclinux) {
  // On a pipe these ioctls would fail with ENOTTY; the filter must answer first.
  ChildResult r = RunFiltered([] {
    int p[2];
    if (pipe(p) != 0) return 100;
    char c = 'x';
    if (ErrnoOf(ioctl(p[0], TIOCSTI, &c)) != EPERM) return 101;
    if (ErrnoOf(syscall(SYS_ioctl, p[0], TIOCLINUX, &c)) != EPERM) return 102;
    // The kernel reads cmd as 32 bits; high bits must not get TIOCSTI past the filter.
    if (ErrnoOf(syscall(SYS_ioctl, p[0], static_cast<unsigned long>(TIOCSTI) | (1UL << 32), &c)) !=
        EPERM) {
      return 103;
    }
    // Other ioctls keep working (or fail the ordinary way).
    int avail = -1;
    if (ioctl(p[0], FIONREAD, &avail) != 0 || avail != 0) return 104;
    if (ErrnoOf(syscall(SYS_ioctl, p[0], TCGETS, nullptr)) != ENOTTY) return 105;
    if (ErrnoOf(syscall(SYS_ioctl, p[0], TIOCSTI + 1, &c)) != ENOTTY) return 106;
    if (ErrnoOf(syscall(SYS_ioctl, p[0], TIOCSTI - 1, &c)) != ENOTTY) return 107;
    // A command with bit 31 set, sign-extended by a caller that held it in an int, still works.
    unsigned long sign_extended = 0xffffffff00000000UL | 0x80086601UL;  // FS_IOC_GETFLAGS
    if (ErrnoOf(syscall(SYS_ioctl, p[0], sign_extended, &avail)) != ENOTTY) return 108;
    return 0;
  });
  EXPECT_EXIT_CODE(r, 0);
}

TEST(SeccompDenied, CloneWithNamespaceFlags) {
  for (unsigned long flag : {CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWIPC,
                             CLONE_NEWUTS, CLONE_NEWCGROUP}) {
    int err = FilteredErrno([flag] {
      long rc = syscall(SYS_clone, flag | SIGCHLD, nullptr, nullptr, nullptr, 0);
      if (rc == 0) _exit(0);  // should not happen; the parent reports success as 0
      return rc > 0 ? 0L : rc;
    });
    EXPECT_EQ(err, EPERM) << "flag " << std::hex << flag;
  }
}

TEST(SeccompDenied, Clone3IsEnosysSoGlibcFallsBack) {
  EXPECT_EQ(FilteredErrno([] { return syscall(SYS_clone3, nullptr, 0); }), ENOSYS);
}

TEST(SeccompAllowed, ConditionalFormsStillWork) {
  ChildResult r = RunFiltered([] {
    if (syscall(SYS_personality, 0xffffffffUL) < 0) return 100;
    if (syscall(SYS_personality, 0UL) < 0) return 101;
    for (int fam : {AF_UNIX, AF_INET, AF_INET6}) {
      int s = socket(fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (s < 0) return 102;
      close(s);
    }
    int nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (nl < 0) return 103;
    close(nl);
    char dir[] = "/tmp/sandpool-seccomp-XXXXXX";
    if (mkdtemp(dir) == nullptr) return 104;
    std::string fifo = std::string(dir) + "/f";
    int rc = mkfifo(fifo.c_str(), 0600);
    unlink(fifo.c_str());
    rmdir(dir);
    if (rc != 0) return 105;
    if (syscall(SYS_clone3, nullptr, 0) != -1 || errno != ENOSYS) return 106;
    return 0;
  });
  EXPECT_EXIT_CODE(r, 0);
}

// ---------------------------------------------------------------------------------------------
// Other architectures' entry points
// ---------------------------------------------------------------------------------------------

#if defined(__x86_64__)
long Int80(long nr) {
  long ret;
  // The i386 entry point from a 64-bit process; the kernel may clobber r8-r11 on return.
  asm volatile("int $0x80" : "=a"(ret) : "a"(nr) : "memory", "r8", "r9", "r10", "r11");
  return ret;
}

TEST(SeccompArch, I386Int80IsKilled) {
  // Without a filter, int 0x80 getpid (i386 nr 20) works only if the kernel has IA32 emulation;
  // without it the entry point does not exist and there is nothing to test.
  ChildResult base = RunChild({}, [] { return Int80(20) == getpid() ? 0 : 1; });
  if (!(WIFEXITED(base.status) && WEXITSTATUS(base.status) == 0)) {
    GTEST_SKIP() << "kernel without IA32 emulation: " << Describe(base.status);
  }
  ChildResult r = RunFiltered([] { return static_cast<int>(Int80(20) & 0x7f); });
  EXPECT_TRUE(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGSYS) << Describe(r.status);
}

TEST(SeccompArch, X32IsKilled) {
  constexpr long kX32Bit = 0x40000000;
  ChildResult r = RunFiltered([] { return ErrnoOf(syscall(kX32Bit | SYS_getpid)); });
  EXPECT_TRUE(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGSYS) << Describe(r.status);
  // An x32 number for a call the native table refuses is killed as well, not EPERM.
  r = RunFiltered([] { return ErrnoOf(syscall(kX32Bit | SYS_mount, 0, 0, 0, 0, 0)); });
  EXPECT_TRUE(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGSYS) << Describe(r.status);
}
#endif

}  // namespace
}  // namespace sandpool

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--stack=nursery") sandpool::g_nursery_stack = true;
  }
  return RUN_ALL_TESTS();
}
