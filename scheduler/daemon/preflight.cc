#include "scheduler/daemon/preflight.h"

#include <linux/capability.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace sandpool {
namespace {

std::string ReadFirstLine(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// The effective capability set, from capget(2) (version 3: 64 bits).
bool EffectiveCaps(uint64_t* out) {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &hdr, data) != 0) return false;
  *out = static_cast<uint64_t>(data[0].effective) | (static_cast<uint64_t>(data[1].effective) << 32);
  return true;
}

struct Mount {
  std::string point, options, fstype, super;
};

std::vector<Mount> Mounts(const std::string& proc) {
  std::vector<Mount> out;
  std::ifstream f(proc + "/self/mountinfo");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string id, parent, dev, root, point, options, field;
    in >> id >> parent >> dev >> root >> point >> options;
    while (in >> field && field != "-") {
    }
    Mount m;
    std::string source;
    in >> m.fstype >> source >> m.super;
    m.point = point, m.options = options;
    out.push_back(std::move(m));
  }
  return out;
}

bool HasOption(const std::string& options, const std::string& name) {
  std::istringstream in(options);
  std::string o;
  while (std::getline(in, o, ',')) {
    if (o == name) return true;
  }
  return false;
}

// A call that cannot succeed: the kernel answers EFAULT, EINVAL, EBADF or ENOENT; a seccomp
// filter in its place answers EPERM or ENOSYS (Docker's and podman's default profiles, the
// containerd RuntimeDefault), and an LSM EACCES.
bool Blocked(long rc) { return rc < 0 && (errno == EPERM || errno == ENOSYS || errno == EACCES); }

}  // namespace

const std::vector<NeededCapability>& NeededCapabilities() {
  static const std::vector<NeededCapability> caps = {
      {CAP_SYS_ADMIN, "CAP_SYS_ADMIN", "mounts (sandbox roots, idmapped template layers, session disks), namespaces, pivot_root"},
      {CAP_SETUID, "CAP_SETUID", "the sandboxes' uid maps onto unprivileged host uids"},
      {CAP_SETGID, "CAP_SETGID", "the sandboxes' gid maps"},
      {CAP_DAC_OVERRIDE, "CAP_DAC_OVERRIDE", "cgroup directories and files owned by others (the sandboxes' host uids)"},
      {CAP_NET_ADMIN, "CAP_NET_ADMIN", "each slot's network namespace (loopback), veth pairs and nftables of network templates"},
      {CAP_MKNOD, "CAP_MKNOD", "the loop device node a session's disk is mounted through"},
      {CAP_KILL, "CAP_KILL", "killing sandbox processes (other uids) left in a stale cgroup after a crash"},
      {CAP_CHOWN, "CAP_CHOWN", "template layers, owned by the template's build sandbox users"},
  };
  return caps;
}

std::vector<std::string> Preflight(const PreflightInput& in) {
  std::vector<std::string> problems;

  uint64_t eff = 0;
  bool caps_ok = true;
  if (!EffectiveCaps(&eff)) {
    problems.push_back("cannot read the capability sets (capget failed)");
    caps_ok = false;
  } else {
    for (const NeededCapability& c : NeededCapabilities()) {
      if ((eff >> c.cap) & 1) continue;
      caps_ok = false;
      problems.push_back(std::string("capability ") + c.name + " is missing (" + c.why +
                         "): podman --cap-add " + (c.name + 4) + ", Kubernetes securityContext.capabilities.add, "
                         "systemd CapabilityBoundingSet=");
    }
  }

  // The system calls a seccomp profile may take away. Without CAP_SYS_ADMIN some answer EPERM
  // for that reason alone: probed only once the capabilities are there.
  if (caps_ok) {
    struct Probe {
      const char* name;
      long rc;
    };
    Probe probes[] = {
        {"mount", ::syscall(SYS_mount, nullptr, nullptr, nullptr, 0, nullptr)},
        {"unshare", ::syscall(SYS_unshare, 0x1)},  // an invalid flag: EINVAL
        {"setns", ::syscall(SYS_setns, -1, 0)},
        {"pivot_root", ::syscall(SYS_pivot_root, nullptr, nullptr)},
        {"clone3", ::syscall(SYS_clone3, nullptr, 0)},
        {"mount_setattr", ::syscall(SYS_mount_setattr, -1, "", 0, nullptr, 0)},
        {"open_tree", ::syscall(SYS_open_tree, -1, "", 0)},
    };
    std::string blocked;
    for (const Probe& p : probes) {
      if (Blocked(p.rc)) blocked += std::string(blocked.empty() ? "" : ", ") + p.name;
    }
    if (!blocked.empty()) {
      problems.push_back("a seccomp filter refuses " + blocked +
                         " (sandboxes need them; sandboxes get sandpool's own filter): podman --security-opt "
                         "seccomp=unconfined, Kubernetes securityContext.seccompProfile.type: Unconfined");
    }
  }

  std::string apparmor = ReadFirstLine(in.proc + "/self/attr/apparmor/current");
  if (apparmor.empty()) apparmor = ReadFirstLine(in.proc + "/self/attr/current");
  if (apparmor.find("(enforce)") != std::string::npos) {
    problems.push_back("AppArmor profile '" + apparmor +
                       "' confines sandpoold (container profiles deny mount, which every sandbox needs): podman "
                       "--security-opt apparmor=unconfined, Kubernetes securityContext.appArmorProfile.type: Unconfined");
  }

  if (ReadFirstLine(in.proc + "/sys/user/max_user_namespaces") == "0") {
    problems.push_back("user namespaces are disabled (user.max_user_namespaces = 0): every sandbox has one");
  }

  std::vector<Mount> mounts = Mounts(in.proc);
  std::string masked;
  for (const Mount& m : mounts) {
    // The kernel mounts a fresh /proc in a sandbox's pid namespace only if the /proc it can see
    // is not partly hidden (fs_fully_visible): a runtime's masks over /proc/kcore, /proc/sys ...
    // make that mount fail. binfmt_misc on its empty directory is allowed.
    if (m.point.rfind("/proc/", 0) == 0 && m.point != "/proc/sys/fs/binfmt_misc") {
      masked += (masked.empty() ? "" : " ") + m.point;
    }
  }
  if (!masked.empty()) {
    if (masked.size() > 200) masked = masked.substr(0, 200) + " ...";
    problems.push_back("/proc has paths masked or mounted over (" + masked +
                       "): the kernel then refuses the sandboxes a /proc of their own; podman --security-opt "
                       "unmask=/proc/*, Kubernetes securityContext.procMount: Unmasked");
  }

  // The cgroup controllers sandpoold creates slot cgroups in must be writable: v1 when a memory
  // controller is mounted (hybrid or legacy layout), otherwise the unified hierarchy.
  bool v1 = false;
  for (const Mount& m : mounts) v1 = v1 || (m.fstype == "cgroup" && HasOption(m.super, "memory"));
  std::string read_only;
  for (const Mount& m : mounts) {
    // The controllers worker/sandbox/cgroup.cc uses (kV1Controllers, kV2Controllers).
    bool relevant = v1 ? (m.fstype == "cgroup" && (HasOption(m.super, "memory") || HasOption(m.super, "pids") ||
                                                   HasOption(m.super, "cpu") || HasOption(m.super, "cpuacct")))
                       : (m.fstype == "cgroup2" && m.point == "/sys/fs/cgroup");
    if (relevant && HasOption(m.options, "ro")) read_only += (read_only.empty() ? "" : " ") + m.point;
  }
  if (!read_only.empty()) {
    problems.push_back("the cgroup filesystem is read-only (" + read_only +
                       "): sandpoold creates a cgroup per slot; give it a writable, delegated cgroup (systemd "
                       "Delegate=yes; in a container, remount its own cgroup writable before sandpoold starts: "
                       "mount -o remount,bind,rw on each of these; docs/SECURITY.md section 5.1)");
  }
  return problems;
}

}  // namespace sandpool
