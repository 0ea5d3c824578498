// A session's shell mother (session_shell_mother.h): runs in the preloaded shell, before its main.
#include "worker/runners/session_shell_mother.h"

#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string_view>

#include "common/syscalls.h"
#include "worker/ipc/channel.h"
#include "worker/sandbox/sandbox_init.h"

namespace sandpool {

long ServeSessionShells(int sock) {
  // Never destroyed: each shell's process returns from here into the shell's main, and must not
  // close, on its way, descriptors that are its own by then.
  auto* ch = new Channel(UniqueFd(sock));
  for (;;) {
    auto f = ch->Receive();
    if (!f.ok()) return -EPIPE;  // the agent is gone
    ShellFactoryReply r{-EINVAL};
    if (f->fds.size() == 5) {
      int fds[5];
      for (int i = 0; i < 5; ++i) fds[i] = f->fds[i].get();
      // A raw clone, not fork(): the shell's at-fork handlers are not ours to run. CLONE_PARENT:
      // the agent's child, as the shells it starts itself are.
      long pid = ::syscall(SYS_clone, CLONE_PARENT | SIGCHLD, nullptr, nullptr, nullptr, 0);
      if (pid == 0) {
        for (auto& fd : f->fds) (void)fd.release();
        if (::setsid() < 0) ::_exit(126);
        // In place without close-on-exec, as an exec'd shell has them.
        if (PlaceFds(fds, 5, 0, 5) != 0 || sys::CloseFrom(5) != 0 || ::chdir("/work") != 0) ::_exit(126);
        return 0;
      }
      r.pid = pid > 0 ? static_cast<int32_t>(pid) : -errno;
    }
    f->fds.clear();  // closed before the answer: the agent's ends see EOF if the shell dies
    if (!ch->Send(0, std::string_view(reinterpret_cast<const char*>(&r), sizeof r)).ok()) return -EPIPE;
  }
}

}  // namespace sandpool
