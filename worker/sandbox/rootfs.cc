#include "worker/sandbox/rootfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "common/syscalls.h"
#include "worker/sandbox/mount_util.h"

namespace sandpool {
namespace {

using namespace layout;

// The staging mount point inside the keeper's private mount namespace. /tmp always exists; the
// host's /tmp is untouched (the mount is private to the keeper's namespace).
constexpr const char* kStage = "/tmp";

// Public, secret-free files from the host's /etc that programs need (dynamic loader, time zone,
// certificates for an egress policy, per-language config). Anything not listed is absent.
const char* const kEtcFromHost[] = {
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "ssl", "ca-certificates",
    "ca-certificates.conf", "mime.types", "protocols", "services", "bash.bashrc", "inputrc",
    "profile", "debian_version", "os-release", "localtime",
};

// Read-only, nosuid, nodev bind of a host path (file or directory) at `dst`. A host symlink is
// recreated as the same symlink instead.
Status BindReadOnly(const std::string& host_path, const std::string& dst, bool optional) {
  struct stat st;
  if (::lstat(host_path.c_str(), &st) != 0) {
    if (optional && errno == ENOENT) return Status::Ok();
    return ErrnoStatus("stat " + host_path);
  }
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

// Copies a host path (file, symlink or directory tree) to `dst`: session sandboxes lay an overlay
// over their /etc, and an overlay does not see the mounts below its lower layer, so their /etc is
// made of copies. Host paths only (the keeper never reads a path a sandbox controls).
Status CopyHostTree(const std::string& src, const std::string& dst, int depth = 0) {
  struct stat st;
  if (::lstat(src.c_str(), &st) != 0) return errno == ENOENT ? Status::Ok() : ErrnoStatus("stat " + src);
  if (depth > 16) return Status::Ok();
  if (S_ISLNK(st.st_mode)) {
    char target[4096];
    ssize_t n = ::readlink(src.c_str(), target, sizeof target - 1);
    if (n < 0) return ErrnoStatus("readlink " + src);
    target[n] = '\0';
    if (::symlink(target, dst.c_str()) != 0 && errno != EEXIST) return ErrnoStatus("symlink " + dst);
    return Status::Ok();
  }
  if (S_ISDIR(st.st_mode)) {
    if (::mkdir(dst.c_str(), st.st_mode & 0755) != 0 && errno != EEXIST) return ErrnoStatus("mkdir " + dst);
    DIR* d = ::opendir(src.c_str());
    if (d == nullptr) return ErrnoStatus("opendir " + src);
    Status s;
    while (struct dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      s = CopyHostTree(src + "/" + name, dst + "/" + name, depth + 1);
      if (!s.ok()) break;
    }
    ::closedir(d);
    return s;
  }
  if (!S_ISREG(st.st_mode)) return Status::Ok();
  UniqueFd in(::open(src.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!in) return ErrnoStatus("open " + src);
  UniqueFd out(::open(dst.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, st.st_mode & 0644));
  if (!out) return ErrnoStatus("create " + dst);
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(in.get(), buf, sizeof buf);
    if (n < 0) return ErrnoStatus("read " + src);
    if (n == 0) break;
    SP_RETURN_IF_ERROR(WriteAll(out.get(), buf, static_cast<size_t>(n)));
  }
  return Status::Ok();
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

// The sandbox's /etc at `etc`: a few synthesized files (users root, sandbox and nobody; its own
// names) and the public ones of the host, bound read-only (`copy` false) or copied.
Status BuildEtc(const SandboxConfig& config, const std::string& etc, bool copy) {
  SP_RETURN_IF_ERROR(MkdirP(etc, 0755));
  const std::string job = std::to_string(kSandboxJobUid);
  SP_RETURN_IF_ERROR(WriteNewFile(etc + "/passwd",
                                  "root:x:0:0:root:/root:/bin/sh\n"
                                  "sandbox:x:" + job + ":" + job + ":sandbox:/work:/bin/sh\n"
                                  "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"));
  SP_RETURN_IF_ERROR(WriteNewFile(etc + "/group", "root:x:0:\nsandbox:x:" + job + ":\nnogroup:x:65534:\n"));
  SP_RETURN_IF_ERROR(WriteNewFile(etc + "/hosts", "127.0.0.1\tlocalhost " + config.hostname + "\n::1\tlocalhost\n"));
  SP_RETURN_IF_ERROR(WriteNewFile(etc + "/hostname", config.hostname + "\n"));
  // A network template's sandboxes resolve through its resolver (scheduler/net/dns_proxy.h). Every
  // DNS packet from them is redirected to it whatever its address; this one (the pool's first)
  // is routed through the slot's link like any other.
  const SlotNetwork& net = config.network;
  std::string resolver = std::to_string(net.pool_base >> 24) + "." + std::to_string((net.pool_base >> 16) & 255) + "." +
                         std::to_string((net.pool_base >> 8) & 255) + "." + std::to_string(net.pool_base & 255);
  SP_RETURN_IF_ERROR(WriteNewFile(etc + "/nsswitch.conf",
                                  std::string("passwd: files\ngroup: files\nhosts: files") + (net.enabled ? " dns\n" : "\n")));
  SP_RETURN_IF_ERROR(WriteNewFile(etc + "/resolv.conf",
                                  net.enabled ? "nameserver " + resolver + "\noptions attempts:2 timeout:2\n" : ""));
  std::vector<std::string> names(std::begin(kEtcFromHost), std::end(kEtcFromHost));
  // Per-interpreter configuration directories (Debian's /etc/python3.11 holds sitecustomize).
  glob_t g;
  if (::glob("/etc/python3*", 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) names.push_back(std::string(g.gl_pathv[i]).substr(5));
    ::globfree(&g);
  }
  for (const std::string& name : names) {
    // (localtime is a symlink into /usr/share/zoneinfo, which the /usr bind provides.)
    SP_RETURN_IF_ERROR(copy ? CopyHostTree("/etc/" + name, etc + "/" + name)
                            : BindReadOnly("/etc/" + name, etc + "/" + name, true));
  }
  return Status::Ok();
}

// What a session keeper adds to its base root (docs/ARCHITECTURE.md, "Sessions"): the system
// directories and /etc as idmapped lower layers (host root -> the slot's sandbox root, so a
// session's copy-up of a file keeps an owner it can map), and the mountpoints of its disk.
Status BuildSessionExtras(const SandboxConfig& config, const std::string& stage, uint32_t sroot) {
  for (const char* d : {kSkel, kRawDisk, kDisk, kDevs, kSys, kMerged}) SP_RETURN_IF_ERROR(MkdirP(stage + d, 0755));
  SP_RETURN_IF_ERROR(Mount("sandpool-devs", stage + kDevs, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,nr_inodes=64,mode=0700"));
  if (!config.root_dir.empty()) return Status::Ok();  // the image is the whole root
  auto ns = IdMapUserns("0 " + std::to_string(sroot) + " 1\n");
  if (!ns.ok()) return ns.status().Prefixed("session idmap");
  for (const std::string& d : config.ro_dirs) {
    struct stat st;
    if (::lstat(d.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || d.find('/', 1) != std::string::npos) continue;
    UniqueFd dir(::open(d.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!dir) return ErrnoStatus("open " + d);
    std::string at = stage + kSys + d;
    SP_RETURN_IF_ERROR(MkdirP(at, 0755));
    SP_RETURN_IF_ERROR(MountIdmapped(dir.get(), at, ns->get()).Prefixed("session lower " + d));
  }
  std::string src = stage + kEtcSrc;
  SP_RETURN_IF_ERROR(MkdirP(src, 0755));
  SP_RETURN_IF_ERROR(Mount("sandpool-etc", src, "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,nr_inodes=16384,mode=0755"));
  SP_RETURN_IF_ERROR(BuildEtc(config, src, true));
  UniqueFd etc(::open(src.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!etc) return ErrnoStatus("open " + src);
  SP_RETURN_IF_ERROR(MkdirP(stage + kEtc, 0755));
  return MountIdmapped(etc.get(), stage + kEtc, ns->get()).Prefixed("session /etc (tmpfs idmapped mounts need Linux 6.3)");
}

}  // namespace

Status BuildKeeperRoot(const SandboxConfig& config, uint32_t slot, bool session, UniqueFd* loop_control) {
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
  if (session && loop_control != nullptr) {
    // Session disks are loop devices; the control device is opened while /dev is the host's.
    loop_control->reset(::open("/dev/loop-control", O_RDWR | O_CLOEXEC));
    if (!*loop_control) return ErrnoStatus("open /dev/loop-control (sessions need loop devices)");
  }
  SP_RETURN_IF_ERROR(Mount("sandpool-root", kStage, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755"));
  std::string stage(kStage);
  if (config.root_dir.empty()) {
    for (const std::string& d : config.ro_dirs) SP_RETURN_IF_ERROR(BindReadOnly(d, std::string(kStage) + d, true));
    SP_RETURN_IF_ERROR(BuildEtc(config, stage + "/etc", false));
  }
  SP_RETURN_IF_ERROR(BuildDev());
  for (const char* d : {"/work", "/tmp", "/proc", "/root", "/var", "/var/tmp", "/.old"}) {
    SP_RETURN_IF_ERROR(MkdirP(stage + d, 0755));
  }
  ::chmod((stage + "/tmp").c_str(), 01777);
  ::chmod((stage + "/var/tmp").c_str(), 01777);
  SP_RETURN_IF_ERROR(Mount("/proc", stage + "/proc", nullptr, MS_BIND, nullptr));
  const uint32_t sroot = config.SlotRootId(slot);
  if (root) {
    // The image's own uid 0 and 1000 become the sandbox's root and job user, so init can lay
    // out the merged root and the job owns what the image gave user 1000.
    auto ns = IdMapUserns(CanonicalOwnersMap(sroot));
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
  if (session) SP_RETURN_IF_ERROR(BuildSessionExtras(config, stage, sroot));
  if (sys::PivotRoot(kStage, (stage + "/.old").c_str()) != 0) return ErrnoStatus("pivot_root");
  if (::chdir("/") != 0) return ErrnoStatus("chdir /");
  if (::umount2("/.old", MNT_DETACH) != 0) return ErrnoStatus("umount /.old");
  if (::rmdir("/.old") != 0) return ErrnoStatus("rmdir /.old");
  return Mount(nullptr, "/", nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr);
}

bool HasCopyOnWriteRoot(const SandboxConfig& config) { return !config.root_dir.empty(); }

bool HasCopyOnWriteLayer(const SandboxConfig& config) {
  return !config.layer_host_dir.empty() && !config.layer_writable;
}

}  // namespace sandpool
