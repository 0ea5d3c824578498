#include "worker/rootfs.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace sandpool {
namespace {

// The staging mount point inside the keeper's private mount namespace. /tmp always exists; the
// host's /tmp is untouched (the mount is private to the keeper's namespace).
constexpr const char* kStage = "/tmp";

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

Status BuildKeeperRoot(const SandboxConfig& config) {
  // Nothing we mount may propagate back to the host.
  SP_RETURN_IF_ERROR(Mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr));
  // The layer is opened before the stage covers /tmp (a state directory may live below it).
  UniqueFd layer;
  if (!config.layer_host_dir.empty()) {
    layer.reset(::open(config.layer_host_dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!layer) return ErrnoStatus("open layer " + config.layer_host_dir);
  }
  SP_RETURN_IF_ERROR(Mount("sandpool-root", kStage, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755"));
  for (const std::string& d : config.ro_dirs) SP_RETURN_IF_ERROR(BindReadOnly(d, true));
  SP_RETURN_IF_ERROR(BuildEtc(config));
  SP_RETURN_IF_ERROR(BuildDev());
  std::string stage(kStage);
  for (const char* d : {"/work", "/tmp", "/proc", "/root", "/var", "/var/tmp", "/.old"}) {
    SP_RETURN_IF_ERROR(MkdirP(stage + d, 0755));
  }
  ::chmod((stage + "/tmp").c_str(), 01777);
  ::chmod((stage + "/var/tmp").c_str(), 01777);
  SP_RETURN_IF_ERROR(Mount("/proc", stage + "/proc", nullptr, MS_BIND, nullptr));
  if (!config.layer_host_dir.empty()) {
    // The template's layer, part of the base root every sandbox copies: no per-sandbox cost.
    std::string dst = stage + config.layer_mount;
    SP_RETURN_IF_ERROR(MkdirP(dst, 0755));
    std::string src = "/proc/self/fd/" + std::to_string(layer.get());
    SP_RETURN_IF_ERROR(Mount(src.c_str(), dst, nullptr, MS_BIND, nullptr));
    unsigned long flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | (config.layer_writable ? 0 : MS_RDONLY);
    SP_RETURN_IF_ERROR(Mount(nullptr, dst, nullptr, flags, nullptr));
  }
  if (::syscall(SYS_pivot_root, kStage, (stage + "/.old").c_str()) != 0) return ErrnoStatus("pivot_root");
  if (::chdir("/") != 0) return ErrnoStatus("chdir /");
  if (::umount2("/.old", MNT_DETACH) != 0) return ErrnoStatus("umount /.old");
  if (::rmdir("/.old") != 0) return ErrnoStatus("rmdir /.old");
  return Mount(nullptr, "/", nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr);
}

Status MountSandboxFilesystems(const SandboxConfig& config) {
  auto opts = [&](uint64_t bytes, const char* mode) {
    return "size=" + std::to_string(bytes) + ",nr_inodes=" + std::to_string(config.inodes) + ",mode=" + mode;
  };
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
  return Status::Ok();
}

}  // namespace sandpool
