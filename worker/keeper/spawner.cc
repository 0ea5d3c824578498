#include "worker/keeper/spawner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>

#include "common/log.h"
#include "common/sparse_copy.h"
#include "worker/ipc/channel.h"
#include "worker/ipc/messages.h"
#include "worker/keeper/keeper.h"

namespace sandpool {
namespace {

// Zeroes the contiguous argv + environ string area the kernel set up at exec and writes a short
// title in its place; /proc/<pid>/cmdline then shows only the title.
void WipeProcessArguments(char** argv) {
  if (argv == nullptr || argv[0] == nullptr) return;
  char* start = argv[0];
  char* end = start;
  for (char** a = argv; *a != nullptr; ++a) {
    if (*a == end || *a == end + 1) end = *a + std::strlen(*a);
  }
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (*e == end + 1) end = *e + std::strlen(*e);
  }
  ::clearenv();  // the pointers into the area we are about to wipe must not be used again
  std::memset(start, 0, static_cast<size_t>(end - start));
  static const char kTitle[] = "sandpool-spawner";
  if (static_cast<size_t>(end - start) >= sizeof kTitle) std::memcpy(start, kTitle, sizeof kTitle);
}

// A new session disk at `path`: a sparse image file of `bytes` with an ext4 file system (no
// reserved blocks, lazy initialisation: about 10 ms). mke2fs runs in a grandchild whose status a
// child reports on a pipe: the spawner ignores SIGCHLD (its keepers are reaped by the kernel),
// so it could not wait for a child of its own.
Status MakeParents(const std::string& path) {
  std::string dir = path.substr(0, path.rfind('/'));
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      std::string part = dir.substr(0, i);
      if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus("mkdir " + part);
    }
  }
  return Status::Ok();
}

Status CopyDisk(const std::string& from, const std::string& path, uint64_t* copied) {
  if (path.empty() || path[0] != '/' || from.empty() || from[0] != '/') return Status::Error("bad disk request");
  SP_RETURN_IF_ERROR(MakeParents(path));
  UniqueFd src(::open(from.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!src) return ErrnoStatus("open " + from);
  UniqueFd dst(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!dst) return ErrnoStatus("create " + path);
  auto n = CopySparse(src.get(), dst.get());
  if (!n.ok()) {
    ::unlink(path.c_str());
    return n.status().Prefixed("copy " + from);
  }
  *copied = *n;
  return Status::Ok();
}

Status MakeDisk(const std::string& path, uint64_t bytes) {
  if (path.empty() || path[0] != '/' || bytes < (16u << 20)) return Status::Error("bad disk request");
  SP_RETURN_IF_ERROR(MakeParents(path));
  {
    UniqueFd img(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!img) return ErrnoStatus("create " + path);
    if (::ftruncate(img.get(), static_cast<off_t>(bytes)) != 0) return ErrnoStatus("size " + path);
  }
  auto status_pipe = MakePipe();
  if (!status_pipe.ok()) return status_pipe.status();
  pid_t child = ::fork();
  if (child < 0) return ErrnoStatus("fork");
  if (child == 0) {
    ::signal(SIGCHLD, SIG_DFL);
    int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    pid_t mkfs = ::fork();
    if (mkfs == 0) {
      ::dup2(devnull, 0);
      ::dup2(devnull, 1);
      const char* argv[] = {"mke2fs", "-q", "-F", "-t", "ext4", "-m", "0", "-E",
                            "lazy_itable_init=1,lazy_journal_init=1,nodiscard", path.c_str(), nullptr};
      const char* envp[] = {"PATH=/usr/sbin:/sbin:/usr/bin:/bin", nullptr};
      ::execve("/sbin/mke2fs", const_cast<char* const*>(argv), const_cast<char* const*>(envp));
      ::execve("/usr/sbin/mke2fs", const_cast<char* const*>(argv), const_cast<char* const*>(envp));
      ::_exit(127);
    }
    int st = 0;
    char code = static_cast<char>(mkfs < 0 || ::waitpid(mkfs, &st, 0) != mkfs ? 126 : WIFEXITED(st) ? WEXITSTATUS(st) : 125);
    (void)!::write(status_pipe->write.get(), &code, 1);
    ::_exit(0);
  }
  status_pipe->write.reset();
  char code = 125;
  if (::read(status_pipe->read.get(), &code, 1) != 1) code = 125;
  if (code != 0) {
    ::unlink(path.c_str());
    return Status::Error("mke2fs failed (" + std::to_string(code) + ") making " + path);
  }
  return Status::Ok();
}

[[noreturn]] void SpawnerMain(const std::vector<SandboxConfig>& templates, const CgroupLayout& layout,
                              pid_t daemon, UniqueFd fd, char** argv) {
  WipeProcessArguments(argv);
  SetLogComponent("spawner");
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != daemon) ::_exit(1);
  ::signal(SIGCHLD, SIG_IGN);
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGTERM, SIG_DFL);
  ::signal(SIGINT, SIG_IGN);  // a terminal's ^C goes to the daemon, which shuts us down
  // Keep only stdio and our channel: the daemon may have opened other things before forking us.
  int keep = ::fcntl(fd.release(), F_DUPFD_CLOEXEC, 3);
  ::dup3(keep, 3, O_CLOEXEC);
  ::syscall(SYS_close_range, 4, ~0U, 0);
  Channel ch{UniqueFd(3)};
  for (;;) {
    auto f = ch.Receive();
    if (!f.ok()) ::_exit(0);
    if (f->type == static_cast<uint16_t>(MsgType::kMakeDisk)) {
      MakeDiskMsg req;
      if (!Decode(f->payload, &req).ok()) continue;
      uint64_t copied = 0;
      Status made = req.from.empty() ? MakeDisk(req.path, req.bytes) : CopyDisk(req.from, req.path, &copied);
      if (!ch.Send(static_cast<uint16_t>(MsgType::kDiskMade),
                   Encode(DiskMadeMsg{req.request, made.ok() ? "" : made.message(), copied})).ok()) {
        ::_exit(0);
      }
      continue;
    }
    if (f->type != static_cast<uint16_t>(MsgType::kSpawnKeeper)) continue;
    SpawnKeeperMsg req;
    if (!Decode(f->payload, &req).ok() || req.template_index >= templates.size()) continue;
    auto pair = MakeSocketPair(SOCK_STREAM);
    if (!pair.ok()) {
      LogError("socketpair for keeper", {{"error", pair.status().message()}});
      continue;
    }
    pid_t pid = ::fork();
    if (pid < 0) {
      LogError("fork keeper", {{"error", ErrnoStatus("fork").message()}});
      continue;
    }
    if (pid == 0) {
      KeeperArgs args{req.slot, ::getppid(), templates[req.template_index], layout, req.session};
      ch.Close();  // the daemon's spawner channel is not the keeper's business; frees fd 3
      pair->b.reset();
      ::dup3(pair->a.get(), 3, O_CLOEXEC);
      ::syscall(SYS_close_range, 4, ~0U, 0);
      (void)pair->a.release();  // closed by close_range above
      KeeperMain(args, UniqueFd(3));
    }
    pair->a.reset();
    // A pidfd, so the daemon can kill a keeper that stopped answering without racing a reused
    // pid. Taken at once: keepers are reaped automatically, and this one cannot have been yet
    // unless something killed it within these microseconds.
    UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    if (!pidfd) {
      LogError("pidfd_open of a new keeper", {{"error", ErrnoStatus("pidfd_open").message()}});
      ::kill(pid, SIGKILL);
      continue;
    }
    Status s = ch.Send(static_cast<uint16_t>(MsgType::kKeeper), Encode(KeeperMsg{req.slot, pid}),
                       {pair->b.get(), pidfd.get()});
    if (!s.ok()) ::_exit(0);
  }
}

}  // namespace

Result<SpawnerHandle> StartSpawner(const std::vector<SandboxConfig>& templates, const CgroupLayout& layout,
                                   char** argv) {
  auto pair = MakeSocketPair(SOCK_STREAM);
  if (!pair.ok()) return pair.status();
  pid_t daemon = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus("fork spawner");
  if (pid == 0) {
    pair->a.reset();
    SpawnerMain(templates, layout, daemon, std::move(pair->b), argv);
  }
  return SpawnerHandle{pid, std::move(pair->a)};
}

}  // namespace sandpool
