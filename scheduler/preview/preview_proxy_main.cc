// sandpool-preview-proxy: the preview proxy's process (preview_server.h), exec'd by sandpoold
// (preview_proxy.h) so that nothing of the daemon (its configuration, the Redis password, its
// heap) is in the process that parses what the internet sends.
//
//   sandpool-preview-proxy --uid N [--log-level L]     fd 3: the listening socket (bound by the
//                                                       daemon), fd 4: the channel (SEQPACKET)
//
// Started as root with an empty environment and no other fds; before it reads anything it
// becomes host uid N (no groups, no capabilities, no_new_privs, not dumpable), dies with the
// daemon (PDEATHSIG, set again after the uid change, which clears it), and once its loop is
// set up loads a seccomp filter that allows only what serving needs: its sockets' I/O,
// accepting, opening AF_INET stream sockets and connecting them (the daemon's table lets its
// uid connect into slots and nowhere else), epoll, memory without PROT_EXEC, clocks, exit.
// Anything else fails with EPERM. It answers "ready" on the channel when it serves.
#include <fcntl.h>
#include <grp.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include "common/log.h"
#include "common/status.h"
#include "scheduler/preview/preview_server.h"

using namespace sandpool;

namespace {

constexpr int kListenFd = 3, kChannelFd = 4;

Status Allow(scmp_filter_ctx ctx, const char* name, std::initializer_list<scmp_arg_cmp> args = {}) {
  int nr = seccomp_syscall_resolve_name(name);
  if (nr == __NR_SCMP_ERROR) return Status::Ok();  // not a call of this architecture
  int rc = seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, nr, static_cast<unsigned>(args.size()), args.begin());
  if (rc != 0) return Status::Error(std::string("seccomp rule for ") + name + ": " + std::strerror(-rc));
  return Status::Ok();
}

// One argument condition (the SCMP_A* macros are C compound literals, which C++ compilers need
// not take: clang refuses them under -Werror).
scmp_arg_cmp Arg(unsigned arg, scmp_compare op, uint64_t a, uint64_t b = 0) { return scmp_arg_cmp{arg, op, a, b}; }

Status LoadFilter() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
  if (ctx == nullptr) return Status::Error("seccomp_init failed");
  struct Release {
    scmp_filter_ctx c;
    ~Release() { seccomp_release(c); }
  } release{ctx};
  // Another architecture's entry points (i386 int 0x80, x32): the process dies.
  if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) != 0) return Status::Error("seccomp attr");
  for (const char* name : {"read", "readv", "recvfrom", "recvmsg", "write", "writev", "sendto", "sendmsg", "close",
                           "shutdown", "accept", "accept4", "connect", "getsockopt", "setsockopt", "getsockname",
                           "getpeername", "fcntl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "epoll_ctl",
                           "clock_gettime", "clock_getres", "gettimeofday", "munmap", "mremap", "brk", "madvise",
                           "exit", "exit_group", "rt_sigreturn", "rt_sigprocmask", "restart_syscall", "futex",
                           "getpid", "gettid"}) {
    SP_RETURN_IF_ERROR(Allow(ctx, name));
  }
#ifdef SANDPOOL_SANITIZED
  // UBSan probes whether memory is readable by writing it into a pipe; ASan takes down its
  // signal stack before a call that does not return (_exit).
  SP_RETURN_IF_ERROR(Allow(ctx, "pipe"));
  SP_RETURN_IF_ERROR(Allow(ctx, "pipe2"));
  SP_RETURN_IF_ERROR(Allow(ctx, "sigaltstack"));
#endif
  // Memory, never executable (no new code at run time).
  SP_RETURN_IF_ERROR(Allow(ctx, "mmap", {Arg(2, SCMP_CMP_MASKED_EQ, PROT_EXEC, 0)}));
  SP_RETURN_IF_ERROR(Allow(ctx, "mprotect", {Arg(2, SCMP_CMP_MASKED_EQ, PROT_EXEC, 0)}));
  // Bytes waiting on a socket (libevent sizes its reads so).
  SP_RETURN_IF_ERROR(Allow(ctx, "ioctl", {Arg(1, SCMP_CMP_EQ, FIONREAD)}));
  // Connections to sandboxes: IPv4 TCP only.
  SP_RETURN_IF_ERROR(Allow(ctx, "socket", {Arg(0, SCMP_CMP_EQ, AF_INET), Arg(1, SCMP_CMP_MASKED_EQ, 0xf, SOCK_STREAM)}));
  int rc = seccomp_load(ctx);
  if (rc != 0) return Status::Error(std::string("seccomp_load: ") + std::strerror(-rc));
  return Status::Ok();
}

Status DropPrivileges(uint32_t uid, pid_t parent) {
  if (::setgroups(0, nullptr) != 0) return ErrnoStatus("setgroups");
  if (::setresgid(uid, uid, uid) != 0) return ErrnoStatus("setresgid");
  if (::setresuid(uid, uid, uid) != 0) return ErrnoStatus("setresuid");  // every capability goes too
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return ErrnoStatus("no_new_privs");
  // A process of this uid (none should exist) cannot ptrace us or read our memory.
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return ErrnoStatus("dumpable");
  // The uid change cleared the parent-death signal the daemon set: again, then check that the
  // daemon did not go in between.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return ErrnoStatus("pdeathsig");
  if (::getppid() != parent) return Status::Error("the daemon is gone");
  return Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  pid_t parent = ::getppid();
  SetLogComponent("preview-proxy");
  ::prctl(PR_SET_NAME, "sp-preview", 0, 0, 0);  // exec'd from an fd: its name would be the fd's number
  long uid = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--uid") {
      char* end = nullptr;
      uid = std::strtol(argv[i + 1], &end, 10);
      if (*end != '\0') uid = -1;
    } else if (flag == "--log-level") {
      LogLevel level;
      if (ParseLogLevel(argv[i + 1], &level)) SetLogLevel(level);
    }
  }
  if (uid <= 0 || uid > 0x7fffffff || ::fcntl(kListenFd, F_GETFD) < 0 || ::fcntl(kChannelFd, F_GETFD) < 0) {
    LogError("usage: sandpool-preview-proxy --uid N [--log-level L], with fd 3 listening and fd 4 the daemon's channel");
    return 2;
  }
  ::fcntl(kListenFd, F_SETFD, FD_CLOEXEC);
  // libevent's listener accepts until EAGAIN: a blocking socket would hang the loop.
  ::fcntl(kListenFd, F_SETFL, ::fcntl(kListenFd, F_GETFL) | O_NONBLOCK);
  ::fcntl(kChannelFd, F_SETFD, FD_CLOEXEC);
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);  // a terminal's ^C goes to the daemon, which ends us
  Status s = DropPrivileges(static_cast<uint32_t>(uid), parent);
  if (s.ok()) {
    s = RunPreviewServer(kListenFd, kChannelFd, []() -> Status {
      SP_RETURN_IF_ERROR(LoadFilter());
      const char ready[] = "ready";
      if (::send(kChannelFd, ready, sizeof ready - 1, MSG_NOSIGNAL) < 0) return ErrnoStatus("channel");
      return Status::Ok();
    });
  }
  if (!s.ok()) {
    LogError("preview proxy failed", {{"error", s.message()}});
    ::_exit(1);
  }
  ::_exit(0);
}
