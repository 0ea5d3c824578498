#include "worker/rootfs.h"

#include <fcntl.h>
#include <glob.h>
#include <linux/mount.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace sandpool {
namespace {

// The staging mount point inside the keeper's private mount namespace. /tmp always exists; the
// host's /tmp is untouched (the mount is private to the keeper's namespace).
constexpr const char* kStage = "/tmp";

// Inside the base root, out of the way of anything an image or a job uses: the idmapped lower
// layers (read-only, prepared by the keeper), the per-sandbox copy-on-write tmpfs and the merged
// root of a prepared-root template (both mounted by each sandbox's init).
constexpr const char* kLowerRoot = "/.sandpool/root";
constexpr const char* kLowerLayer = "/.sandpool/layer";
constexpr const char* kCow = "/.sandpool/cow";
constexpr const char* kMerged = "/.sandpool/merged";

// Public, secret-free files from the host's /etc that programs need (dynamic loader, time zone,
// certificates for a future egress policy, per-language config). Anything not listed is absent.
const char* const kEtcBinds[] = {
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "ssl", "ca-certificates",
    "ca-certificates.conf", "mime.types", "protocols", "services", "bash.bashrc", "inputrc",
    "profile", "debian_version", "os-release",
};

const char* const kMaskedProcFiles[] = {
    "kcore", "keys", "key-users", "kallsyms", "kmsg", "kpagecgroup", "kpagecount", "kpageflags",
    "timer_list", "sched_debug", "sysrq-trigger", "latency_stats", "config.gz",
};

Status Mount(const char* src, const std::string& dst, const char* type, unsigned long flags,
             const char* data) {
  if (::mount(src, dst.c_str(), type, flags, data) != 0) {
    return ErrnoStatus(std::string("mount ") + (src ? src : "none") + " on " + dst);
  }
  return Status::Ok();
}


// A user namespace used only as the id mapping of idmapped mounts: `map` ("inside host count"
// lines) becomes its uid_map and gid_map. A throwaway child creates it; its ns file keeps it.
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

// Mounts a read-only, nosuid, nodev clone of the directory `dir_fd` at `dst`, its file owners
// translated through `userns` (an idmapped mount: the files on disk are not touched).
Status MountIdmapped(int dir_fd, const std::string& dst, int userns) {
  UniqueFd tree(static_cast<int>(::syscall(SYS_open_tree, dir_fd, "",
                                           OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH)));
  if (!tree) return ErrnoStatus("open_tree for " + dst);
  struct mount_attr attr = {};
  attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  attr.userns_fd = static_cast<uint64_t>(userns);
  if (::syscall(SYS_mount_setattr, tree.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
    return ErrnoStatus("idmap mount for " + dst + " (the file system must support idmapped mounts)");
  }
  if (::syscall(SYS_move_mount, tree.get(), "", AT_FDCWD, dst.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) {
    return ErrnoStatus("move_mount " + dst);
  }
  return Status::Ok();
}

Status MountOverlay(const std::string& dst, const std::string& lower, const std::string& cow_name) {
  std::string upper = std::string(kCow) + "/" + cow_name;
  SP_RETURN_IF_ERROR(MkdirP(upper + "/u", 0755));
  SP_RETURN_IF_ERROR(MkdirP(upper + "/w", 0755));
  // The merged directory's owner and mode are the upper's: give it the lower's, so the layer's
  // top directory stays its owner's (the job's, for a layer setup made).
  struct stat st;
  if (::stat(lower.c_str(), &st) != 0) return ErrnoStatus("stat " + lower);
  if (::chown((upper + "/u").c_str(), st.st_uid, st.st_gid) != 0 || ::chmod((upper + "/u").c_str(), st.st_mode & 07777) != 0) {
    return ErrnoStatus("chown " + upper + "/u");
  }
  // userxattr: overlay keeps its whiteouts and opaque markers in user.* xattrs, the only ones a
  // user namespace may set (tmpfs has them).
  std::string opts = "lowerdir=" + lower + ",upperdir=" + upper + "/u,workdir=" + upper + "/w,userxattr";
  return Mount("overlay", dst, "overlay", MS_NOSUID | MS_NODEV, opts.c_str());
}

Status WriteNewFile(const std::string& path, std::string_view content) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd) return ErrnoStatus("create " + path);
  return WriteAll(fd.get(), content.data(), content.size()).Prefixed(path);
}

// Read-only, nosuid, nodev bind of a host path (file or directory) at the same path under the
// stage. A host symlink is recreated as the same symlink instead.
Status BindReadOnly(const std::string& host_path, bool optional) {
  struct stat st;
  if (::lstat(host_path.c_str(), &st) != 0) {
    if (optional && errno == ENOENT) return Status::Ok();
    return ErrnoStatus("stat " + host_path);
  }
  std::string dst = std::string(kStage) + host_path;
  SP_RETURN_IF_ERROR(MkdirP(dst.substr(0, dst.rfind('/')), 0755));
  if (S_ISLNK(st.st_mode)) {
    char target[4096];
    ssize_t n = ::readlink(host_path.c_str(), target, sizeof target - 1);
    if (n < 0) return ErrnoStatus("readlink " + host_path);
    target[n] = '\0';
    if (::symlink(target, dst.c_str()) != 0 && errno != EEXIST) return ErrnoStatus("symlink " + dst);
    return Status::Ok();
  }
  if (S_ISDIR(st.st_mode)) {
    SP_RETURN_IF_ERROR(MkdirP(dst, 0755));
  } else {
    SP_RETURN_IF_ERROR(WriteNewFile(dst, ""));
  }
  SP_RETURN_IF_ERROR(Mount(host_path.c_str(), dst, nullptr, MS_BIND, nullptr));
  return Mount(nullptr, dst, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr);
}

Status BuildDev() {
  std::string dev = std::string(kStage) + "/dev";
  SP_RETURN_IF_ERROR(MkdirP(dev, 0755));
  SP_RETURN_IF_ERROR(Mount("sandpool-dev", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755"));
  for (const char* node : {"null", "zero", "full", "random", "urandom"}) {
    std::string dst = dev + "/" + node;
    SP_RETURN_IF_ERROR(WriteNewFile(dst, ""));
    SP_RETURN_IF_ERROR(Mount((std::string("/dev/") + node).c_str(), dst, nullptr, MS_BIND, nullptr));
    SP_RETURN_IF_ERROR(Mount(nullptr, dst, nullptr, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NOEXEC, nullptr));
  }
  const char* const links[][2] = {{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
                                   {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}};
  for (const auto& l : links) {
    if (::symlink(l[0], (dev + "/" + l[1]).c_str()) != 0) return ErrnoStatus("symlink /dev/" + std::string(l[1]));
  }
  SP_RETURN_IF_ERROR(MkdirP(dev + "/shm", 01777));
  return Mount(nullptr, dev, nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, nullptr);
}

Status BuildEtc(const SandboxConfig& config) {
  std::string etc = std::string(kStage) + "/etc";
  SP_RETURN_IF_ERROR(MkdirP(etc, 0755));
  SP_RETURN_IF_ERROR(WriteNewFile(etc + "/passwd",
                                  "root:x:0:0:root:/root:/bin/sh\n"
                                  "sandbox:x:1000:1000:sandbox:/work:/bin/sh\n"
                                  "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"));
  SP_RETURN_IF_ERROR(WriteNewFile(etc + "/group", "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n"));
  SP_RETURN_IF_ERROR(WriteNewFile(etc + "/hosts", "127.0.0.1\tlocalhost " + config.hostname + "\n::1\tlocalhost\n"));
  SP_RETURN_IF_ERROR(WriteNewFile(etc + "/hostname", config.hostname + "\n"));
  SP_RETURN_IF_ERROR(WriteNewFile(etc + "/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files\n"));
  SP_RETURN_IF_ERROR(WriteNewFile(etc + "/resolv.conf", ""));
  for (const char* name : kEtcBinds) SP_RETURN_IF_ERROR(BindReadOnly(std::string("/etc/") + name, true));
  // Per-interpreter configuration directories (Debian's /etc/python3.11 holds sitecustomize).
  glob_t g;
  if (::glob("/etc/python3*", 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) {
      Status s = BindReadOnly(g.gl_pathv[i], true);
      if (!s.ok()) {
        ::globfree(&g);
        return s;
      }
    }
    ::globfree(&g);
  }
  // localtime is a symlink into /usr/share/zoneinfo, which the /usr bind provides.
  return BindReadOnly("/etc/localtime", true);
}

}  // namespace

Status MkdirP(const std::string& path, mode_t mode) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      std::string part = path.substr(0, i);
      if (::mkdir(part.c_str(), mode) != 0 && errno != EEXIST) return ErrnoStatus("mkdir " + part);
    }
  }
  return Status::Ok();
}

Status BuildKeeperRoot(const SandboxConfig& config, uint32_t slot) {
  // Nothing we mount may propagate back to the host.
  SP_RETURN_IF_ERROR(Mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr));
  // Host directories are opened before the stage covers /tmp (they may live below it).
  UniqueFd layer, root;
  if (!config.layer_host_dir.empty()) {
    layer.reset(::open(config.layer_host_dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!layer) return ErrnoStatus("open layer " + config.layer_host_dir);
  }
  if (!config.root_dir.empty()) {
    root.reset(::open(config.root_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!root) return ErrnoStatus("open root " + config.root_dir);
  }
  SP_RETURN_IF_ERROR(Mount("sandpool-root", kStage, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755"));
  std::string stage(kStage);
  if (config.root_dir.empty()) {
    for (const std::string& d : config.ro_dirs) SP_RETURN_IF_ERROR(BindReadOnly(d, true));
    SP_RETURN_IF_ERROR(BuildEtc(config));
  }
  SP_RETURN_IF_ERROR(BuildDev());
  for (const char* d : {"/work", "/tmp", "/proc", "/root", "/var", "/var/tmp", "/.old"}) {
    SP_RETURN_IF_ERROR(MkdirP(stage + d, 0755));
  }
  ::chmod((stage + "/tmp").c_str(), 01777);
  ::chmod((stage + "/var/tmp").c_str(), 01777);
  SP_RETURN_IF_ERROR(Mount("/proc", stage + "/proc", nullptr, MS_BIND, nullptr));
  // Ids of this slot's sandboxes: their root and their job user.
  const uint32_t sroot = config.host_id_base + 2 * slot, sjob = sroot + 1;
  if (root) {
    // The image's own uid 0 and 1000 become the sandbox's root and job user, so init can lay
    // out the merged root and the job owns what the image gave user 1000.
    auto ns = IdMapUserns("0 " + std::to_string(sroot) + " 1\n1000 " + std::to_string(sjob) + " 1\n");
    if (!ns.ok()) return ns.status().Prefixed("root " + config.root_dir);
    for (const char* d : {kLowerRoot, kMerged}) SP_RETURN_IF_ERROR(MkdirP(stage + d, 0755));
    SP_RETURN_IF_ERROR(MountIdmapped(root.get(), stage + kLowerRoot, ns->get()).Prefixed("root " + config.root_dir));
  }
  if (layer) {
    // With a prepared root, the layer is bound into the merged root by each sandbox's init.
    bool direct = config.layer_writable && config.root_dir.empty();
    std::string at = stage + (direct ? config.layer_mount : std::string(kLowerLayer));
    SP_RETURN_IF_ERROR(MkdirP(at, 0755));
    if (config.layer_writable) {
      // The build: its setup commands write the layer itself, as the build slot's users.
      std::string src = "/proc/self/fd/" + std::to_string(layer.get());
      SP_RETURN_IF_ERROR(Mount(src.c_str(), at, nullptr, MS_BIND, nullptr));
      SP_RETURN_IF_ERROR(Mount(nullptr, at, nullptr, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV, nullptr));
    } else {
      // Jobs: the files the build slot's users made are this slot's users' files here, read-only;
      // each sandbox lays its own copy-on-write upper over them (MountSandboxFilesystems).
      uint32_t b = config.layer_owner_base;
      auto ns = IdMapUserns(std::to_string(b) + " " + std::to_string(sroot) + " 2\n");
      if (!ns.ok() || !MountIdmapped(layer.get(), at, ns->get()).ok()) {
        // Kernels before 5.12, or a state directory whose file system cannot be idmapped: the
        // layer as it is, read-only (its files then belong to nobody in the sandbox, and the
        // overlay below will not be writable for the job).
        std::string src = "/proc/self/fd/" + std::to_string(layer.get());
        SP_RETURN_IF_ERROR(Mount(src.c_str(), at, nullptr, MS_BIND, nullptr));
        SP_RETURN_IF_ERROR(Mount(nullptr, at, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr));
      }
      if (config.root_dir.empty()) SP_RETURN_IF_ERROR(MkdirP(stage + config.layer_mount, 0755));
    }
  }
  if (layer || root) SP_RETURN_IF_ERROR(MkdirP(stage + kCow, 0755));
  if (::syscall(SYS_pivot_root, kStage, (stage + "/.old").c_str()) != 0) return ErrnoStatus("pivot_root");
  if (::chdir("/") != 0) return ErrnoStatus("chdir /");
  if (::umount2("/.old", MNT_DETACH) != 0) return ErrnoStatus("umount /.old");
  if (::rmdir("/.old") != 0) return ErrnoStatus("rmdir /.old");
  return Mount(nullptr, "/", nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr);
}

bool HasCopyOnWriteRoot(const SandboxConfig& config) { return !config.root_dir.empty(); }

bool HasCopyOnWriteLayer(const SandboxConfig& config) {
  return !config.layer_host_dir.empty() && !config.layer_writable;
}

Status MountSandboxFilesystems(const SandboxConfig& config) {
  auto opts = [&](uint64_t bytes, const char* mode) {
    return "size=" + std::to_string(bytes) + ",nr_inodes=" + std::to_string(config.inodes) + ",mode=" + mode;
  };
  const bool cow_root = HasCopyOnWriteRoot(config), cow_layer = HasCopyOnWriteLayer(config);
  if (cow_root || cow_layer) {
    // One size-capped tmpfs holds this sandbox's upper layers; it dies with the sandbox's mount
    // namespace, so nothing a job changed reaches the next one or the host.
    SP_RETURN_IF_ERROR(Mount("cow", kCow, "tmpfs", MS_NOSUID | MS_NODEV, opts(config.upper_bytes, "0755").c_str()));
  }
  if (cow_root) {
    // The merged root: the image, copy-on-write. Mount points the sandbox needs are made in the
    // upper layer when the image lacks them; /dev is the keeper's.
    SP_RETURN_IF_ERROR(MountOverlay(kMerged, kLowerRoot, "root")
                           .Prefixed("prepared root (needs Linux 6.6 or later: an overlay in a user "
                                     "namespace over an idmapped lower, with a tmpfs upper)"));
    const std::string m(kMerged);
    for (const char* d : {"/work", "/tmp", "/var/tmp", "/proc", "/dev", "/.old"}) SP_RETURN_IF_ERROR(MkdirP(m + d, 0755));
    SP_RETURN_IF_ERROR(Mount("/dev", m + "/dev", nullptr, MS_BIND | MS_REC, nullptr));
    // The sandbox's own names, where the image has an /etc (best effort: an image may make
    // them links, which are not followed).
    (void)WriteNewFile(m + "/etc/hostname", config.hostname + "\n");
    (void)WriteNewFile(m + "/etc/hosts", "127.0.0.1\tlocalhost " + config.hostname + "\n::1\tlocalhost\n");
    if (!config.layer_host_dir.empty()) SP_RETURN_IF_ERROR(MkdirP(m + config.layer_mount, 0755));
    if (config.layer_writable && !config.layer_host_dir.empty()) {
      // A build over a prepared root: setup writes the layer itself.
      SP_RETURN_IF_ERROR(Mount(kLowerLayer, m + config.layer_mount, nullptr, MS_BIND | MS_REC, nullptr));
    }
  }
  if (cow_layer) {
    std::string at = (cow_root ? std::string(kMerged) : std::string()) + config.layer_mount;
    if (!MountOverlay(at, kLowerLayer, "layer").ok()) {
      // Kernels before 6.6 (no user xattrs on tmpfs, or no overlay over idmapped layers in a
      // user namespace before 5.19): the layer read-only, as it is, instead of copy-on-write.
      SP_RETURN_IF_ERROR(Mount(kLowerLayer, at, nullptr, MS_BIND | MS_REC, nullptr));
    }
  }
  if (cow_root || cow_layer) {
    // The overlays hold their own references to the upper; the job needs no second way in.
    if (::umount2(kCow, MNT_DETACH) != 0) return ErrnoStatus(std::string("umount ") + kCow);
  }
  if (cow_root) {
    // The old root stays attached at /.old until the new /proc is mounted: the kernel mounts a
    // proc in a user namespace only while a fully visible one (the keeper's bind) exists.
    if (::syscall(SYS_pivot_root, kMerged, (std::string(kMerged) + "/.old").c_str()) != 0) return ErrnoStatus("pivot_root");
    if (::chdir("/") != 0) return ErrnoStatus("chdir /");
  }
  SP_RETURN_IF_ERROR(Mount("work", "/work", "tmpfs", MS_NOSUID | MS_NODEV,
                           (opts(config.work_bytes, "0755") + ",uid=1000,gid=1000").c_str()));
  SP_RETURN_IF_ERROR(Mount("tmp", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts(config.tmp_bytes, "1777").c_str()));
  SP_RETURN_IF_ERROR(Mount("tmp", "/var/tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts(config.tmp_bytes, "1777").c_str()));
  SP_RETURN_IF_ERROR(Mount("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts(config.shm_bytes, "1777").c_str()));
  SP_RETURN_IF_ERROR(Mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr));
  // Kernel-wide interfaces a job has no business reading, masked like container runtimes do:
  // /dev/null over files, an empty read-only tmpfs over directories.
  for (const char* f : kMaskedProcFiles) {
    std::string path = std::string("/proc/") + f;
    if (::access(path.c_str(), F_OK) != 0) continue;
    SP_RETURN_IF_ERROR(Mount("/dev/null", path, nullptr, MS_BIND, nullptr));
  }
  for (const char* d : {"/proc/acpi", "/proc/scsi", "/proc/irq", "/proc/bus"}) {
    if (::access(d, F_OK) != 0) continue;
    SP_RETURN_IF_ERROR(Mount("masked", d, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0,mode=0555"));
  }
  if (cow_root) {
    if (::umount2("/.old", MNT_DETACH) != 0) return ErrnoStatus("umount /.old");
    if (::rmdir("/.old") != 0) return ErrnoStatus("rmdir /.old");
  }
  return Status::Ok();
}

}  // namespace sandpool
