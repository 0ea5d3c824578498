#include "worker/sandbox/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/log.h"

namespace sandpool {
namespace {

const char* const kV1Controllers[] = {"memory", "pids", "cpu", "cpuacct"};
const char* const kV2Controllers[] = {"memory", "pids", "cpu"};

struct MountInfo {
  std::string root, mountpoint, fstype, super_options;
};

std::vector<MountInfo> ReadMountInfo() {
  std::vector<MountInfo> out;
  std::ifstream f("/proc/self/mountinfo");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream s(line);
    std::string id, parent, dev, root, mp, opts, tok;
    s >> id >> parent >> dev >> root >> mp >> opts;
    while (s >> tok && tok != "-") {
    }
    MountInfo m;
    m.root = root;
    m.mountpoint = mp;
    s >> m.fstype >> tok >> m.super_options;
    out.push_back(std::move(m));
  }
  return out;
}

bool HasOption(const std::string& opts, std::string_view want) {
  size_t start = 0;
  while (start <= opts.size()) {
    size_t end = opts.find(',', start);
    if (end == std::string::npos) end = opts.size();
    if (std::string_view(opts).substr(start, end - start) == want) return true;
    start = end + 1;
  }
  return false;
}

// /proc/self/cgroup: controller list -> path ("" key for the v2 line).
std::map<std::string, std::string> OwnCgroups() {
  std::map<std::string, std::string> out;
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    size_t a = line.find(':');
    size_t b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string ctrls = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    if (ctrls.empty()) {
      out[""] = path;
      continue;
    }
    size_t start = 0;
    while (start <= ctrls.size()) {
      size_t end = ctrls.find(',', start);
      if (end == std::string::npos) end = ctrls.size();
      out[ctrls.substr(start, end - start)] = path;
      start = end + 1;
    }
  }
  return out;
}

std::string JoinCgroupPath(const std::string& mountpoint, const std::string& mount_root,
                           const std::string& own) {
  std::string rel = own;
  if (mount_root != "/" && rel.rfind(mount_root, 0) == 0) rel = rel.substr(mount_root.size());
  if (rel == "/") rel.clear();
  return mountpoint + rel;
}

Status WritePath(const std::string& path, const std::string& value) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open " + path);
  ssize_t n = ::write(fd.get(), value.data(), value.size());
  if (n < 0) return ErrnoStatus("write " + path + " <- " + value);
  return Status::Ok();
}

Result<std::string> ReadPath(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open " + path);
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read " + path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("mkdir " + path);
  return Status::Ok();
}

// Removes a cgroup directory and its child cgroups (which must hold no processes). Cgroup
// directories contain only kernel files, which rmdir ignores.
Status RemoveTree(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return errno == ENOENT ? Status::Ok() : ErrnoStatus("opendir " + path);
  std::vector<std::string> children;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_type == DT_DIR && std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      children.push_back(path + "/" + e->d_name);
    }
  }
  ::closedir(d);
  for (const auto& c : children) SP_RETURN_IF_ERROR(RemoveTree(c));
  // A cgroup whose last task just exited can report EBUSY for a short while.
  for (int i = 0; i < 200; ++i) {
    if (::rmdir(path.c_str()) == 0 || errno == ENOENT) return Status::Ok();
    if (errno != EBUSY) break;
    ::usleep(5000);
  }
  return ErrnoStatus("rmdir " + path);
}

uint64_t KeyedValue(const std::string& text, std::string_view key) {
  std::istringstream s(text);
  std::string k;
  uint64_t v;
  while (s >> k >> v) {
    if (k == key) return v;
  }
  return 0;
}

uint64_t ParseU64(const std::string& s) { return std::strtoull(s.c_str(), nullptr, 10); }

}  // namespace

Result<CgroupLayout> SetUpCgroups(const std::string& requested_mode, const std::string& instance,
                                  bool allow_missing_controllers) {
  std::vector<MountInfo> mounts = ReadMountInfo();
  std::map<std::string, std::string> own = OwnCgroups();
  const MountInfo* v2 = nullptr;
  std::map<std::string, const MountInfo*> v1;
  for (const MountInfo& m : mounts) {
    if (m.fstype == "cgroup2" && (v2 == nullptr || m.mountpoint == "/sys/fs/cgroup")) v2 = &m;
    if (m.fstype == "cgroup") {
      for (const char* c : kV1Controllers) {
        if (HasOption(m.super_options, c)) v1[c] = &m;
      }
    }
  }
  bool v1_usable = v1.count("memory") && v1.count("pids") && v1.count("cpu") && v1.count("cpuacct");
  bool pure_v2 = v2 != nullptr && v2->mountpoint == "/sys/fs/cgroup";

  CgroupLayout layout;
  if (requested_mode == "v1" || (requested_mode == "auto" && !pure_v2 && v1_usable)) {
    if (!v1_usable) return Status::Error("cgroup v1: memory, pids, cpu and cpuacct controllers must be mounted");
    layout.mode = CgroupMode::kV1;
    for (const char* c : kV1Controllers) {
      std::string dir = JoinCgroupPath(v1[c]->mountpoint, v1[c]->root, own[c]) + "/" + instance;
      SP_RETURN_IF_ERROR(RemoveTree(dir).Prefixed("removing stale cgroups"));
      SP_RETURN_IF_ERROR(MakeDir(dir));
      layout.instance_dirs[c] = dir;
    }
    return layout;
  }
  if (requested_mode != "v2" && requested_mode != "auto") {
    return Status::Error("unknown cgroup mode '" + requested_mode + "' (auto, v1 or v2)");
  }
  if (v2 == nullptr) return Status::Error("no usable cgroup hierarchy (neither v1 controllers nor cgroup2)");
  layout.mode = CgroupMode::kV2;
  std::string parent = JoinCgroupPath(v2->mountpoint, v2->root, own[""]);
  std::string dir = parent + "/" + instance;
  // A stale instance may still hold our supervisor leaf from a previous run of this process
  // tree; only slot directories are removed.
  SP_RETURN_IF_ERROR(MakeDir(dir));
  if (DIR* d = ::opendir(dir.c_str())) {
    std::vector<std::string> stale;
    while (struct dirent* e = ::readdir(d)) {
      if (std::strncmp(e->d_name, "slot-", 5) == 0) stale.push_back(dir + "/" + e->d_name);
    }
    ::closedir(d);
    for (const auto& s : stale) SP_RETURN_IF_ERROR(RemoveTree(s).Prefixed("removing stale cgroups"));
  }
  SP_RETURN_IF_ERROR(MakeDir(dir + "/supervisor"));
  SP_RETURN_IF_ERROR(WritePath(dir + "/supervisor/cgroup.procs", "0").Prefixed("moving sandpoold into its supervisor cgroup"));

  auto available = ReadPath(parent + "/cgroup.controllers");
  std::string avail = available.ok() ? *available : "";
  for (const char* c : kV2Controllers) {
    bool have = (" " + avail + " ").find(std::string(" ") + c) != std::string::npos;
    Status s = have ? WritePath(parent + "/cgroup.subtree_control", std::string("+") + c)
                    : Status::Error(std::string("controller ") + c + " not available in " + parent);
    if (s.ok()) s = WritePath(dir + "/cgroup.subtree_control", std::string("+") + c);
    if (!s.ok()) {
      if (!allow_missing_controllers) {
        return s.Prefixed("cgroup v2 (run sandpoold in a cgroup of its own with the memory, pids and cpu controllers delegated)");
      }
      layout.v2_has_controllers = false;
    }
  }
  layout.instance_dirs[""] = dir;
  return layout;
}

Status RemoveSlotCgroups(const CgroupLayout& layout) {
  Status first;
  for (const auto& [ctrl, dir] : layout.instance_dirs) {
    std::vector<std::string> slots;
    if (DIR* d = ::opendir(dir.c_str())) {
      while (struct dirent* e = ::readdir(d)) {
        if (std::strncmp(e->d_name, "slot-", 5) == 0) slots.push_back(dir + "/" + e->d_name);
      }
      ::closedir(d);
    }
    for (const std::string& s : slots) {
      Status r = RemoveTree(s);
      if (!r.ok() && first.ok()) first = r;
    }
    if (layout.mode == CgroupMode::kV1) {
      Status r = RemoveTree(dir);
      if (!r.ok() && first.ok()) first = r;
    }
  }
  return first;
}

namespace {

// Opens `dir` and keeps it as an fd.
Result<std::shared_ptr<UniqueFd>> OpenDir(const std::string& dir) {
  auto fd = std::make_shared<UniqueFd>(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd->valid()) return ErrnoStatus("open " + dir);
  return fd;
}

}  // namespace

Result<SlotCgroup> SlotCgroup::Create(const CgroupLayout& layout, uint32_t slot, const CgroupLimits& limits) {
  SlotCgroup cg;
  cg.mode_ = layout.mode;
  cg.v2_has_controllers_ = layout.v2_has_controllers;
  cg.limits_ = limits;
  std::string name = "/slot-" + std::to_string(slot);
  for (const auto& [ctrl, base] : layout.instance_dirs) {
    std::string dir = base + name;
    SP_RETURN_IF_ERROR(RemoveTree(dir));
    SP_RETURN_IF_ERROR(MakeDir(dir));
    cg.dirs_[ctrl] = dir;
    auto fd = OpenDir(dir);
    if (!fd.ok()) return fd.status();
    cg.dir_fds_[ctrl] = *fd;
  }
  if (cg.mode_ == CgroupMode::kV2 && cg.v2_has_controllers_) {
    // The slot holds no process itself; its sandboxes' cgroups get the controllers.
    for (const char* c : {"+memory", "+pids", "+cpu"}) {
      UniqueFd f(::openat(cg.dir_fds_[""]->get(), "cgroup.subtree_control", O_WRONLY | O_CLOEXEC));
      if (!f || ::write(f.get(), c, std::strlen(c)) < 0) return ErrnoStatus(std::string("enable ") + c + " in " + cg.dirs_[""]);
    }
  }
  return cg;
}

Result<SandboxCgroup> SlotCgroup::NewSandbox(const std::string& name) {
  SandboxCgroup cg;
  cg.mode_ = mode_;
  cg.name_ = name;
  cg.limits_ = limits_;
  cg.enforce_ = mode_ == CgroupMode::kV1 || v2_has_controllers_;
  for (const auto& [ctrl, slot_fd] : dir_fds_) {
    // A stale one of the same name (a keeper that died before removing it) holds no process:
    // its slot was recreated empty, so only a directory of this keeper's own can be here.
    (void)::unlinkat(slot_fd->get(), name.c_str(), AT_REMOVEDIR);
    if (::mkdirat(slot_fd->get(), name.c_str(), 0755) != 0) return ErrnoStatus("mkdir " + dirs_[ctrl] + "/" + name);
    auto fd = std::make_shared<UniqueFd>(::openat(slot_fd->get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd->valid()) return ErrnoStatus("open " + dirs_[ctrl] + "/" + name);
    cg.dirs_[ctrl] = dirs_[ctrl] + "/" + name;
    cg.dir_fds_[ctrl] = fd;
    cg.parent_fds_[ctrl] = slot_fd;
  }
  auto fail = [&](const Status& s) -> Status {
    (void)cg.Remove();
    return s;
  };
  if (mode_ == CgroupMode::kV2) {
    if (!v2_has_controllers_) return cg;
    cg.v2_peak_.reset(::openat(cg.dir_fds_[""]->get(), "memory.peak", O_RDWR | O_CLOEXEC));
    Status s = cg.WriteFile("", "cpu.max", std::to_string(limits_.cpu_quota_us) + " " + std::to_string(limits_.cpu_period_us));
    if (s.ok()) s = cg.WriteFile("", "memory.swap.max", std::to_string(limits_.swap_bytes));
    if (!s.ok()) return fail(s);
  } else {
    Status s = cg.WriteFile("cpu", "cpu.cfs_period_us", std::to_string(limits_.cpu_period_us));
    if (s.ok()) s = cg.WriteFile("cpu", "cpu.cfs_quota_us", std::to_string(limits_.cpu_quota_us));
    if (!s.ok()) return fail(s);
  }
  Status s = cg.SetLimits(limits_.memory_bytes, limits_.pids);
  if (!s.ok()) return fail(s);
  return cg;
}

int SandboxCgroup::OpenFile(char mode, const std::string& controller, const char* file) {
  std::string key = mode + controller + "/" + file;
  if (auto it = files_.find(key); it != files_.end()) return it->second.get();
  auto dir = dir_fds_.find(controller);
  if (dir == dir_fds_.end()) {
    errno = ENOENT;
    return -1;
  }
  UniqueFd fd(::openat(dir->second->get(), file, (mode == 'w' ? O_WRONLY : O_RDONLY) | O_CLOEXEC));
  if (!fd) return -1;
  return files_.emplace(std::move(key), std::move(fd)).first->second.get();
}

Status SandboxCgroup::WriteFile(const std::string& controller, const char* file, const std::string& value) {
  int fd = OpenFile('w', controller, file);
  if (fd < 0) return ErrnoStatus(std::string("open ") + controller + "/" + file);
  // Each write is one whole value to cgroupfs, wherever the offset is.
  if (::pwrite(fd, value.data(), value.size(), 0) < 0) {
    return ErrnoStatus(std::string("write ") + controller + "/" + file + " <- " + value);
  }
  return Status::Ok();
}

Result<std::string> SandboxCgroup::ReadFile(const std::string& controller, const char* file) {
  int fd = OpenFile('r', controller, file);
  if (fd < 0) return ErrnoStatus(std::string("open ") + controller + "/" + file);
  // A read from offset 0 makes cgroupfs show the file afresh, and a read that does not fill the
  // buffer has all of it: every file read here is one record of cgroupfs's seq_file (a value or a
  // few keyed lines, far under a page), or, for cgroup.procs, only its emptiness matters (which
  // the first read tells). A read at a later offset would make cgroupfs show the file again from
  // its start to find that offset: two reads per figure cost twice one.
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(out.size()))) > 0;) {
    out.append(buf, static_cast<size_t>(n));
    if (static_cast<size_t>(n) < sizeof buf) break;
  }
  return out;
}

Status SandboxCgroup::Attach(pid_t pid) {
  std::string p = std::to_string(pid);
  for (const auto& [ctrl, dir] : dirs_) SP_RETURN_IF_ERROR(WriteFile(ctrl, "cgroup.procs", p));
  return Status::Ok();
}

Status SandboxCgroup::SetLimits(uint64_t memory_bytes, uint64_t pids) {
  if (!enforce_) return Status::Ok();  // v2 without controllers (tests only): nothing to enforce
  if (memory_bytes != 0 && memory_bytes != cur_memory_) {
    std::string mem = std::to_string(memory_bytes);
    if (mode_ == CgroupMode::kV1) {
      std::string memsw = std::to_string(memory_bytes + limits_.swap_bytes);
      // memory.limit must stay <= memory.memsw.limit: order the two writes by direction.
      bool has_memsw = ReadFile("memory", "memory.memsw.limit_in_bytes").ok();
      // cur_memory_ == 0: still the kernel's default (unlimited), so this is a lowering.
      if (has_memsw && cur_memory_ != 0 && memory_bytes > cur_memory_) {
        SP_RETURN_IF_ERROR(WriteFile("memory", "memory.memsw.limit_in_bytes", memsw));
        SP_RETURN_IF_ERROR(WriteFile("memory", "memory.limit_in_bytes", mem));
      } else {
        SP_RETURN_IF_ERROR(WriteFile("memory", "memory.limit_in_bytes", mem));
        if (has_memsw) SP_RETURN_IF_ERROR(WriteFile("memory", "memory.memsw.limit_in_bytes", memsw));
      }
      // v1 charges socket buffers to a memory cgroup only once its TCP limit was written (and
      // then apart from memory.usage): the keeper adds the two up while a job runs and kills at
      // the limit, since this limit alone only puts sockets under pressure. The file is absent
      // when kmem accounting is compiled out; then socket buffers are not charged at all.
      Status tcp = WriteFile("memory", "memory.kmem.tcp.limit_in_bytes", mem);
      if (!tcp.ok() && tcp.sys_errno() != ENOENT) return tcp;
    } else {
      SP_RETURN_IF_ERROR(WriteFile("", "memory.max", mem));
    }
    cur_memory_ = memory_bytes;
  }
  if (pids != 0 && pids != cur_pids_) {
    // + 1: the sandbox's init.
    SP_RETURN_IF_ERROR(WriteFile(mode_ == CgroupMode::kV1 ? "pids" : "", "pids.max", std::to_string(pids + 1)));
    cur_pids_ = pids;
  }
  return Status::Ok();
}

Status SandboxCgroup::SetCpuQuota(uint64_t quota_us) {
  if (!enforce_) return Status::Ok();
  if (mode_ == CgroupMode::kV1) return WriteFile("cpu", "cpu.cfs_quota_us", std::to_string(quota_us));
  return WriteFile("", "cpu.max", std::to_string(quota_us) + " " + std::to_string(limits_.cpu_period_us));
}

Result<uint64_t> SandboxCgroup::ProcessCount() {
  auto p = ReadFile(mode_ == CgroupMode::kV1 ? "pids" : "", "pids.current");
  if (!p.ok()) return p.status();
  return ParseU64(*p);
}

Result<CgroupStats> SandboxCgroup::Read() {
  CgroupStats st;
  if (mode_ == CgroupMode::kV1) {
    auto cpu = ReadFile("cpuacct", "cpuacct.usage");
    if (!cpu.ok()) return cpu.status();
    st.cpu_usage_us = ParseU64(*cpu) / 1000;
    if (auto m = ReadFile("memory", "memory.max_usage_in_bytes"); m.ok()) st.peak_memory_bytes = ParseU64(*m);
    // Socket buffers are charged apart on v1; their peak counts toward the job's.
    if (auto t = ReadFile("memory", "memory.kmem.tcp.max_usage_in_bytes"); t.ok()) st.peak_memory_bytes += ParseU64(*t);
    if (auto o = ReadFile("memory", "memory.oom_control"); o.ok()) st.oom_kills = KeyedValue(*o, "oom_kill");
    if (auto p = ReadFile("pids", "pids.events"); p.ok()) st.pids_max_hits = KeyedValue(*p, "max");
    return st;
  }
  auto cpu = ReadFile("", "cpu.stat");
  if (!cpu.ok()) return cpu.status();
  st.cpu_usage_us = KeyedValue(*cpu, "usage_usec");
  if (v2_peak_) {
    char buf[32] = {};
    if (::pread(v2_peak_.get(), buf, sizeof buf - 1, 0) > 0) st.peak_memory_bytes = ParseU64(buf);
  }
  if (auto o = ReadFile("", "memory.events"); o.ok()) st.oom_kills = KeyedValue(*o, "oom_kill");
  if (auto p = ReadFile("", "pids.events"); p.ok()) st.pids_max_hits = KeyedValue(*p, "max");
  return st;
}

Result<uint64_t> SandboxCgroup::MemoryInUse() {
  if (mode_ == CgroupMode::kV1) {
    auto m = ReadFile("memory", "memory.usage_in_bytes");
    if (!m.ok()) return m.status();
    uint64_t used = ParseU64(*m);
    if (auto t = ReadFile("memory", "memory.kmem.tcp.usage_in_bytes"); t.ok()) used += ParseU64(*t);
    return used;
  }
  auto m = ReadFile("", "memory.current");
  if (!m.ok()) return m.status();
  return ParseU64(*m);
}

Status SandboxCgroup::KillAll() {
  if (mode_ != CgroupMode::kV2) return Status::Ok();
  return WriteFile("", "cgroup.kill", "1");
}

Status SandboxCgroup::Recycle(uint64_t max_leftover_bytes) {
  if (!valid()) return Status::Error("no cgroup");
  // Tasks leave their cgroups a moment after their pid namespace's init is reaped.
  const char* tasks_dir = mode_ == CgroupMode::kV1 ? "pids" : "";
  for (int i = 0;; ++i) {
    auto procs = ReadFile(tasks_dir, "cgroup.procs");
    if (!procs.ok()) return procs.status();
    bool empty = procs->empty();
    // pids are uncharged when a task is released, after it left cgroup.procs.
    if (empty && enforce_) {
      auto n = ProcessCount();
      if (!n.ok()) return n.status();
      empty = *n == 0;
    }
    if (empty) break;
    if (i == 200) return Status::Error("tasks still in " + name_);
    ::usleep(1000);
  }
  if (!enforce_) return Status::Ok();
  auto left = MemoryInUse();
  if (!left.ok()) return left.status();
  if (*left > max_leftover_bytes) {
    return Status::Error(std::to_string(*left) + " bytes still charged to " + name_);
  }
  if (mode_ == CgroupMode::kV1) {
    SP_RETURN_IF_ERROR(WriteFile("memory", "memory.max_usage_in_bytes", "0"));
    for (const char* f : {"memory.memsw.max_usage_in_bytes", "memory.kmem.tcp.max_usage_in_bytes"}) {
      Status s = WriteFile("memory", f, "0");
      if (!s.ok() && s.sys_errno() != ENOENT) return s;
    }
  } else {
    // Any write resets the peak, as read through this same open file (kernel 6.12 and later).
    if (!v2_peak_ || ::pwrite(v2_peak_.get(), "reset", 5, 0) < 0) return ErrnoStatus("reset memory.peak of " + name_);
  }
  return SetLimits(limits_.memory_bytes, limits_.pids);
}

Status SandboxCgroup::Remove() {
  Status first;
  for (const auto& [ctrl, parent] : parent_fds_) {
    // A cgroup whose last task just exited can report EBUSY for a short while.
    int err = 0;
    for (int i = 0; i < 200; ++i) {
      err = ::unlinkat(parent->get(), name_.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : errno;
      if (err != EBUSY) break;
      ::usleep(5000);
    }
    if (err != 0 && first.ok()) first = ErrnoStatus("rmdir " + dirs_[ctrl], err);
  }
  parent_fds_.clear();
  dirs_.clear();
  dir_fds_.clear();
  files_.clear();
  v2_peak_.reset();
  return first;
}

}  // namespace sandpool
