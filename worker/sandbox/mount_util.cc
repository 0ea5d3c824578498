#include "worker/sandbox/mount_util.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "common/syscalls.h"
#include "worker/sandbox/sandbox_config.h"

namespace sandpool {

Status Mount(const char* src, const std::string& dst, const char* type, unsigned long flags,
             const char* data) {
  if (::mount(src, dst.c_str(), type, flags, data) != 0) {
    return ErrnoStatus(std::string("mount ") + (src ? src : "none") + " on " + dst);
  }
  return Status::Ok();
}

Status MkdirP(const std::string& path, mode_t mode) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      std::string part = path.substr(0, i);
      if (::mkdir(part.c_str(), mode) != 0 && errno != EEXIST) return ErrnoStatus("mkdir " + part);
    }
  }
  return Status::Ok();
}

Status WriteNewFile(const std::string& path, std::string_view content) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd) return ErrnoStatus("create " + path);
  return WriteAll(fd.get(), content.data(), content.size()).Prefixed(path);
}

Status MountOverlay(const std::string& dst, const std::vector<std::string>& lowers, const std::string& upper,
                    const std::string& work) {
  if (lowers.empty()) return Status::Error("overlay " + dst + ": no lower layer");
  // The merged directory's owner and mode are the upper's: a new upper gets the lowest layer's,
  // so the layer's top directory stays its owner's (the job's, for a layer setup made).
  struct stat st, up;
  if (::stat(lowers.back().c_str(), &st) != 0) return ErrnoStatus("stat " + lowers.back());
  if (::stat(upper.c_str(), &up) != 0) return ErrnoStatus("stat " + upper);
  if (up.st_nlink <= 2 && (up.st_uid != st.st_uid || up.st_gid != st.st_gid || (up.st_mode & 07777) != (st.st_mode & 07777))) {
    if (::chown(upper.c_str(), st.st_uid, st.st_gid) != 0 || ::chmod(upper.c_str(), st.st_mode & 07777) != 0) {
      return ErrnoStatus("chown " + upper);
    }
  }
  std::string lowerdir;
  for (const std::string& l : lowers) lowerdir += (lowerdir.empty() ? "" : ":") + l;
  std::string opts = "lowerdir=" + lowerdir + ",upperdir=" + upper + ",workdir=" + work + ",userxattr";
  return Mount("overlay", dst, "overlay", MS_NOSUID | MS_NODEV, opts.c_str());
}

Result<UniqueFd> IdMapUserns(const std::string& map) {
  auto ready = MakePipe();
  if (!ready.ok()) return ready.status();
  auto hold = MakePipe();
  if (!hold.ok()) return hold.status();
  pid_t child = ::fork();
  if (child < 0) return ErrnoStatus("fork");
  if (child == 0) {
    // Only async-signal-safe calls: the keeper is single-threaded, but keep to the rule.
    char c = ::unshare(CLONE_NEWUSER) == 0 ? 'u' : 'e';
    (void)!::write(ready->write.get(), &c, 1);
    (void)!::read(hold->read.get(), &c, 1);
    ::_exit(0);
  }
  ready->write.reset();
  hold->read.reset();
  auto reap = [child] {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  };
  char c = 0;
  if (::read(ready->read.get(), &c, 1) != 1 || c != 'u') {
    reap();
    return Status::Error("idmap user namespace: unshare(CLONE_NEWUSER) failed");
  }
  std::string proc = "/proc/" + std::to_string(child) + "/";
  Status s = Status::Ok();
  for (const char* f : {"uid_map", "gid_map"}) {
    UniqueFd fd(::open((proc + f).c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd || ::write(fd.get(), map.data(), map.size()) != static_cast<ssize_t>(map.size())) {
      s = ErrnoStatus("write " + proc + f);
      break;
    }
  }
  UniqueFd ns;
  if (s.ok()) {
    ns.reset(::open((proc + "ns/user").c_str(), O_RDONLY | O_CLOEXEC));
    if (!ns) s = ErrnoStatus("open " + proc + "ns/user");
  }
  reap();
  if (!s.ok()) return s;
  return ns;
}

std::string CanonicalOwnersMap(uint32_t sandbox_root) {
  return "0 " + std::to_string(sandbox_root) + " 1\n" + std::to_string(kSandboxJobUid) + " " +
         std::to_string(sandbox_root + 1) + " 1\n";
}

Status MountIdmapped(int dir_fd, const std::string& dst, int userns, bool writable) {
  UniqueFd tree(sys::OpenTree(dir_fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH));
  if (!tree) return ErrnoStatus("open_tree for " + dst);
  struct mount_attr attr = {};
  attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (writable ? 0 : MOUNT_ATTR_RDONLY);
  attr.userns_fd = static_cast<uint64_t>(userns);
  if (sys::MountSetattr(tree.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
    return ErrnoStatus("idmap mount for " + dst + " (the file system must support idmapped mounts)");
  }
  if (sys::MoveMount(tree.get(), "", AT_FDCWD, dst.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) {
    return ErrnoStatus("move_mount " + dst);
  }
  return Status::Ok();
}

}  // namespace sandpool
