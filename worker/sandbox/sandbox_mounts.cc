// The file systems a sandbox mounts for itself, in its init, inside its own user and mount
// namespaces (so everything here runs after clone: sandbox_init.h's rules for init apply). The
// keeper's side, the base root these start from, is rootfs.cc.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "common/syscalls.h"
#include "worker/sandbox/mount_util.h"
#include "worker/sandbox/rootfs.h"
#include "worker/sandbox/sandbox_config.h"

namespace sandpool {
namespace {

using namespace layout;

const char* const kMaskedProcFiles[] = {
    "kcore", "keys", "key-users", "kallsyms", "kmsg", "kpagecgroup", "kpagecount", "kpageflags",
    "timer_list", "sched_debug", "sysrq-trigger", "latency_stats", "config.gz",
};

// A fresh /proc for the sandbox's pid namespace, with the kernel-wide interfaces a job has no
// business reading masked like container runtimes do: /dev/null over files, an empty read-only
// tmpfs over directories. What this kernel lacks is skipped: the mount's own ENOENT says so,
// without a lookup of its own first (each is a walk of /proc, per sandbox).
Status MountProc() {
  SP_RETURN_IF_ERROR(Mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr));
  // Whether `path` was masked (false: it does not exist), or the error.
  auto mask = [](const char* src, const std::string& path, const char* type, unsigned long flags,
                 const char* data) -> Result<bool> {
    if (::mount(src, path.c_str(), type, flags, data) == 0) return true;
    if (errno == ENOENT) return false;
    return ErrnoStatus("mask " + path);
  };
  for (const char* f : kMaskedProcFiles) {
    SP_RETURN_IF_ERROR(mask("/dev/null", std::string("/proc/") + f, nullptr, MS_BIND, nullptr).status());
  }
  // One empty tmpfs, read-only in its superblock, bound over the rest: each superblock costs its
  // creation and, at the sandbox's end, a teardown of its own (a bind of one costs neither).
  const char* empty = nullptr;
  for (const char* d : {"/proc/acpi", "/proc/scsi", "/proc/irq", "/proc/bus"}) {
    Result<bool> masked = empty == nullptr
                              ? mask("masked", d, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0,mode=0555")
                              : mask(empty, d, nullptr, MS_BIND, nullptr);
    if (!masked.ok()) return masked.status();
    if (masked.value() && empty == nullptr) empty = d;
  }
  return Status::Ok();
}

// A job sandbox's copy-on-write overlay `name` at `dst` over `lower`, its upper on the sandbox's
// copy-on-write tmpfs (layout::kCow).
Status CowOverlay(const std::string& dst, const std::string& lower, const std::string& name) {
  std::string dir = std::string(kCow) + "/" + name;
  SP_RETURN_IF_ERROR(MkdirP(dir + "/u", 0755));
  SP_RETURN_IF_ERROR(MkdirP(dir + "/w", 0755));
  return MountOverlay(dst, {lower}, dir + "/u", dir + "/w");
}

}  // namespace

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
    SP_RETURN_IF_ERROR(CowOverlay(kMerged, kLowerRoot, "root")
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
    if (!CowOverlay(at, kLowerLayer, "layer").ok()) {
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
    if (sys::PivotRoot(kMerged, (std::string(kMerged) + "/.old").c_str()) != 0) return ErrnoStatus("pivot_root");
    if (::chdir("/") != 0) return ErrnoStatus("chdir /");
  }
  SP_RETURN_IF_ERROR(Mount("work", "/work", "tmpfs", MS_NOSUID | MS_NODEV,
                           (opts(config.work_bytes, "0755") + ",uid=1000,gid=1000").c_str()));
  SP_RETURN_IF_ERROR(Mount("tmp", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts(config.tmp_bytes, "1777").c_str()));
  SP_RETURN_IF_ERROR(Mount("tmp", "/var/tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts(config.tmp_bytes, "1777").c_str()));
  SP_RETURN_IF_ERROR(Mount("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts(config.shm_bytes, "1777").c_str()));
  SP_RETURN_IF_ERROR(MountProc());
  if (cow_root) {
    if (::umount2("/.old", MNT_DETACH) != 0) return ErrnoStatus("umount /.old");
    if (::rmdir("/.old") != 0) return ErrnoStatus("rmdir /.old");
  }
  return Status::Ok();
}

Status MountMotherFilesystems(const SandboxConfig& config) {
  // Unmasked: the mother runs no job code, and each sandbox mounts its own, masked, over it.
  SP_RETURN_IF_ERROR(Mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr));
  if (HasCopyOnWriteLayer(config)) {
    // The layer where the sandboxes have it, as they first see it (read-only: the keeper's
    // lower). A python mother looks at her sys.path at start-up (PYTHONPATH into the layer), and
    // what she finds there, or that there is nothing, is cached in the memory every job copies.
    SP_RETURN_IF_ERROR(Mount(kLowerLayer, config.layer_mount, nullptr, MS_BIND, nullptr));
  }
  return Status::Ok();
}

// A session's root (docs/ARCHITECTURE.md, "Sessions"): every directory is copy-on-write over the
// template, and every change goes to the session's disk (layout::kDisk: upper/<name> and
// work/<name> for each overlay), so whatever the session writes, wherever, is kept.
//   host-based template: "/" over a skeleton (tmpfs: the top-level directories and links of
//     the base root), and an overlay per system directory (its idmapped lower in layout::kSys),
//     one for /etc (layout::kEtc), one for the layer;
//   prepared root: "/" over the image, and one for the layer.
Status MountSessionFilesystems(const SandboxConfig& config, bool fresh) {
  const std::string disk(kDisk), merged(kMerged);
  const bool image = !config.root_dir.empty();
  auto overlay = [&](const std::string& at, const std::string& lower, const std::string& name) -> Status {
    std::string upper = disk + "/upper/" + name, work = disk + "/work/" + name;
    if (fresh) {
      SP_RETURN_IF_ERROR(MkdirP(upper, 0755));
      SP_RETURN_IF_ERROR(MkdirP(work, 0755));
    }
    return MountOverlay(at, {lower}, upper, work).Prefixed("session overlay " + name);
  };
  std::string root_lower = kLowerRoot;
  if (!image) {
    // The skeleton: the base root's top level, minus what only the keeper uses.
    root_lower = kSkel;
    SP_RETURN_IF_ERROR(Mount("skel", kSkel, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,nr_inodes=256,mode=0755"));
    DIR* top = ::opendir("/");
    if (top == nullptr) return ErrnoStatus("opendir /");
    while (struct dirent* e = ::readdir(top)) {
      std::string name = e->d_name;
      if (name == "." || name == ".." || name == ".sandpool") continue;
      std::string src = "/" + name, dst = std::string(kSkel) + "/" + name;
      struct stat st;
      if (::lstat(src.c_str(), &st) != 0) continue;
      if (S_ISLNK(st.st_mode)) {
        char target[4096];
        ssize_t n = ::readlink(src.c_str(), target, sizeof target - 1);
        if (n < 0) continue;
        target[n] = '\0';
        if (::symlink(target, dst.c_str()) != 0) { ::closedir(top); return ErrnoStatus("symlink " + dst); }
      } else if (S_ISDIR(st.st_mode)) {
        if (::mkdir(dst.c_str(), 0755) != 0) { ::closedir(top); return ErrnoStatus("mkdir " + dst); }
      }
    }
    ::closedir(top);
    for (const char* d : {"/home", "/opt", "/run", "/mnt", "/srv", "/media", "/usr", "/etc"}) {
      (void)::mkdir((std::string(kSkel) + d).c_str(), 0755);
    }
    SP_RETURN_IF_ERROR(Mount(nullptr, kSkel, nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr));
  }
  SP_RETURN_IF_ERROR(overlay(merged, root_lower, "root"));
  if (!image) {
    // One overlay per system directory and for /etc: their lowers are mounts of their own.
    if (DIR* sys = ::opendir(kSys)) {
      std::vector<std::string> dirs;
      while (struct dirent* e = ::readdir(sys)) {
        std::string name = e->d_name;
        if (name != "." && name != "..") dirs.push_back(name);
      }
      ::closedir(sys);
      for (const std::string& d : dirs) {
        SP_RETURN_IF_ERROR(MkdirP(merged + "/" + d, 0755));
        SP_RETURN_IF_ERROR(overlay(merged + "/" + d, std::string(kSys) + "/" + d, "sys-" + d));
      }
    }
    SP_RETURN_IF_ERROR(MkdirP(merged + "/etc", 0755));
    SP_RETURN_IF_ERROR(overlay(merged + "/etc", kEtc, "etc"));
  }
  if (!config.layer_host_dir.empty()) {
    SP_RETURN_IF_ERROR(MkdirP(merged + config.layer_mount, 0755));
    SP_RETURN_IF_ERROR(overlay(merged + config.layer_mount, kLowerLayer, "layer"));
  }
  // The places a session expects, made on its first start (and kept on its disk).
  for (const char* d : {"/work", "/tmp", "/var/tmp", "/root", "/proc", "/dev", "/.sandpool-old"}) {
    SP_RETURN_IF_ERROR(MkdirP(merged + d, 0755));
  }
  if (fresh) {
    if (::chown((merged + "/work").c_str(), kSandboxJobUid, kSandboxJobUid) != 0) return ErrnoStatus("chown /work");
    ::chmod((merged + "/tmp").c_str(), 01777);
    ::chmod((merged + "/var/tmp").c_str(), 01777);
    (void)WriteNewFile(merged + "/etc/hostname", config.hostname + "\n");
    (void)WriteNewFile(merged + "/etc/hosts", "127.0.0.1\tlocalhost " + config.hostname + "\n::1\tlocalhost\n");
  }
  SP_RETURN_IF_ERROR(Mount("/dev", merged + "/dev", nullptr, MS_BIND | MS_REC, nullptr));
  // The old root stays attached until the new /proc is mounted: the kernel mounts a proc in a
  // user namespace only while a fully visible one (the keeper's bind) exists.
  if (::chdir(merged.c_str()) != 0) return ErrnoStatus("chdir " + merged);
  if (sys::PivotRoot(".", ".sandpool-old") != 0) return ErrnoStatus("pivot_root");
  if (::chdir("/") != 0) return ErrnoStatus("chdir /");
  auto tmpfs_opts = [&](uint64_t bytes, const char* mode) {
    return "size=" + std::to_string(bytes) + ",nr_inodes=" + std::to_string(config.inodes) + ",mode=" + mode;
  };
  SP_RETURN_IF_ERROR(Mount("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, tmpfs_opts(config.shm_bytes, "1777").c_str()));
  SP_RETURN_IF_ERROR(MountProc());
  if (::umount2("/.sandpool-old", MNT_DETACH) != 0) return ErrnoStatus("umount the old root");
  if (::rmdir("/.sandpool-old") != 0) return ErrnoStatus("rmdir /.sandpool-old");
  return Status::Ok();
}

}  // namespace sandpool
