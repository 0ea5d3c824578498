// libsandpool_nursery.so: how a template's nursery mother (nursery.h) runs the library. A python
// mother calls its C interface through her foreign-function interface; a shell, which cannot
// load a library, is started with the loader preloading it, and its constructor is the mother.
#include <fcntl.h>
#include <linux/prctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "worker/runners/nursery_mother.h"
#include "worker/runners/session_shell_mother.h"
#include "worker/runners/zygote.h"
#include "worker/sandbox/sandbox_init.h"

namespace {

// What the mother says on her stderr (the keeper reads a dead mother's output) before she exits.
[[noreturn]] void MotherExit(long served) {
  if (served == -EPIPE) ::_exit(0);  // the keeper is gone
  const char* why = served == -EINVAL ? "sandpool shell mother: the keeper's config was cut short or malformed\n"
                                      : "sandpool shell mother: her signals could not be set\n";
  (void)!::write(2, why, std::strlen(why));
  ::_exit(2);
}

// Ends the environment /proc/<pid>/environ shows at `end` (the loader's variables, last in it,
// were there), keeping every other address of the process as it is: PR_SET_MM_MAP, which needs
// no privilege (only an executable's change would). Best effort: where the kernel lacks it
// (CONFIG_CHECKPOINT_RESTORE), the variables' bytes stay, zeroed.
void EndShownEnvironment(char* end) {
  char stat[1024];
  int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = ::read(fd, stat, sizeof stat - 1);
  ::close(fd);
  if (n <= 0) return;
  stat[n] = '\0';
  // proc(5): after the command's closing parenthesis, field 3 on; the addresses are fields 26-28
  // (start_code, end_code, start_stack) and 45-51 (start_data .. env_end).
  const char* p = std::strrchr(stat, ')');
  if (p == nullptr) return;
  unsigned long long field[53] = {};
  int i = 3;
  for (p += 2; *p != '\0' && i < 53; ++i) {
    field[i] = std::strtoull(p, nullptr, 10);
    p = std::strchr(p, ' ');
    if (p == nullptr) break;
    ++p;
  }
  if (i < 52) return;
  struct prctl_mm_map map = {};
  map.start_code = field[26];
  map.end_code = field[27];
  map.start_stack = field[28];
  map.start_data = field[45];
  map.end_data = field[46];
  map.start_brk = field[47];
  map.brk = static_cast<unsigned long long>(::syscall(SYS_brk, 0));
  map.arg_start = field[48];
  map.arg_end = field[49];
  map.env_start = field[50];
  map.env_end = reinterpret_cast<unsigned long long>(end);
  map.exe_fd = static_cast<__u32>(-1);
  if (map.env_end <= map.env_start || map.env_end > field[51]) return;
  (void)::prctl(PR_SET_MM, PR_SET_MM_MAP, &map, sizeof map, 0);
}

// A shell mother: the warm shell, started with the loader's variables (kNurseryPreloadEnv,
// kNurseryBindNowEnv) and her fds 3 (her socket) and 4 (this library). This runs before the
// shell's main, and in the mother it never returns; it returns in each of her clones, into the
// shell's start: that shell then starts as an exec'd one would, without the exec, the loading
// and the relocations (the mother did them, once). The mother's shell never reads a script: her
// main never runs. Two kinds, told apart by the command line:
//  - a shell template's mother (ZygoteCommand's; sandbox_init.cc, LaunchStub): fd 3 is the
//    socket to the keeper; she serves sandbox after sandbox (NurseryServe) and exits when the
//    keeper has gone; each job's process comes back confined and with its script pipe;
//  - a session's (SessionShellCommand's; session_agent.cc, the factory): fd 3 is the socket to
//    the agent; she serves warm shell after warm shell (session_shell_mother.h), already
//    confined herself, and exits when the agent has gone.
__attribute__((constructor)) void ShellMother(int argc, char** argv, char** envp) {
  const char* preload = std::getenv("LD_PRELOAD");
  if (preload == nullptr || std::strcmp(preload, std::strchr(sandpool::kNurseryPreloadEnv, '=') + 1) != 0) {
    return;  // loaded into a python mother, which calls sandpool_nursery_serve herself
  }
  const bool session = sandpool::IsSessionShellArgv(argc, argv);
  if (!session && !sandpool::IsShellZygoteArgv(argc, argv)) return;
  // Out of the environment the shell reads (and its jobs' children would inherit), and out of
  // the memory /proc/<pid>/environ shows: zeroed in place, and that shown part ended before them.
  char* shown[2] = {nullptr, nullptr};
  for (char** e = envp; *e != nullptr; ++e) {
    if (std::strcmp(*e, sandpool::kNurseryPreloadEnv) == 0) shown[0] = *e;
    if (std::strcmp(*e, sandpool::kNurseryBindNowEnv) == 0) shown[1] = *e;
  }
  ::unsetenv("LD_PRELOAD");
  ::unsetenv("LD_BIND_NOW");
  char* first = nullptr;
  for (char* s : shown) {
    if (s == nullptr) continue;
    if (first == nullptr || s < first) first = s;
    std::memset(s, 0, std::strlen(s));
  }
  if (first != nullptr) EndShownEnvironment(first);
  ::close(4);  // the library, loaded
  // Named for the host's tools and tests, like the inits she clones (which inherit it); each
  // job's shell takes back the name its exec would have given it.
  ::prctl(PR_SET_NAME, session ? "sandpool-shells" : "sandpool-mother", 0, 0, 0);
  if (session) {
    if (sandpool::ServeSessionShells(3) != 0) ::_exit(0);  // the agent is gone
  } else {
    if (::write(3, "R", 1) != 1) ::_exit(0);
    long served = sandpool::NurseryServe(3);
    if (served != 0) MotherExit(served);
  }
  // The job's process or the session's warm shell: into the shell's main, which runs its script.
  const char* slash = std::strrchr(argv[0], '/');
  ::prctl(PR_SET_NAME, slash != nullptr ? slash + 1 : argv[0], 0, 0, 0);
}

}  // namespace

extern "C" {

// In a python mother (`sock` her socket to the keeper, after her 'R'): the keeper's config,
// then sandbox after sandbox (nursery_mother.h, NurseryServe). Returns 0 only in each job's
// process; in the mother, -errno once there is nothing more to serve.
__attribute__((visibility("default"))) long sandpool_nursery_serve(int sock) {
  return sandpool::NurseryServe(sock);
}

}
