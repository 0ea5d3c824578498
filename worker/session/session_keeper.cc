#include "worker/session/session_keeper.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/clock.h"
#include "common/log.h"
#include "common/sparse_copy.h"
#include "common/syscalls.h"
#include "worker/ipc/messages.h"
#include "worker/ipc/session_messages.h"
#include "worker/ipc/stub_protocol.h"
#include "worker/sandbox/mount_util.h"
#include "worker/sandbox/netns_setup.h"
#include "worker/sandbox/sandbox.h"
#include "worker/session/session_agent.h"

namespace sandpool {
namespace {

using namespace layout;

class SessionKeeper {
 public:
  SessionKeeper(const SandboxConfig& config, uint32_t slot, Channel ch, SlotCgroup cgroup, SeccompProgram seccomp,
                UniqueFd loop_control, UniqueFd nursery_lib)
      : config_(config), slot_(slot), ch_(std::move(ch)), cgroup_(std::move(cgroup)), seccomp_(std::move(seccomp)),
        loop_control_(std::move(loop_control)), nursery_lib_(std::move(nursery_lib)) {}

  [[noreturn]] void Run() {
    // The disk's id mapping is the slot's, whichever session comes: made while no session waits
    // (a keeper is started ahead of the session it serves), not on a start's path.
    (void)IdMapNamespace();
    for (;;) {
      for (Frame& f : WaitFrames(-1)) {
        if (f.type != static_cast<uint16_t>(SessionMsg::kStart)) continue;
        SessionStartMsg m;
        if (!DecodeMsg(f.payload, &m).ok() || f.fds.size() != 1) {
          Send(SessionMsg::kFailed, EncodeMsg(SessionFailedMsg{"malformed start"}));
          continue;
        }
        int64_t t0 = MonotonicUs();
        Status s = Start(m, std::move(f.fds[0]));
        if (!s.ok()) {
          LogWarn("session sandbox failed", {{"slot", slot_}, {"session", m.session}, {"error", s.message()}});
          End();
          Send(SessionMsg::kFailed, EncodeMsg(SessionFailedMsg{s.message()}));
          continue;
        }
        SessionReadyMsg ready{gen_, static_cast<uint64_t>(MonotonicUs() - t0)};
        Send(SessionMsg::kReady, EncodeMsg(ready), {sb_.stub.get()});
        sb_.stub.reset();  // the scheduler's now
        Serve();
      }
    }
  }

 private:
  void Send(SessionMsg t, const std::string& payload, const std::vector<int>& fds = {}) {
    if (!ch_.Send(static_cast<uint16_t>(t), payload, fds).ok()) Exit();
  }

  [[noreturn]] void Exit() {
    End();
    ::_exit(0);
  }

  std::vector<Frame> WaitFrames(int timeout_ms) {
    struct pollfd p = {ch_.fd(), POLLIN, 0};
    std::vector<Frame> frames;
    if (::poll(&p, 1, timeout_ms) > 0) {
      Status s = ch_.OnReadable(&frames);
      if (!s.ok()) Exit();
    }
    return frames;
  }

  // The user namespace that maps the disk's canonical owners to this slot's (mount_util.h), made
  // once and kept; tried again at the next start if making it failed.
  Result<int> IdMapNamespace() {
    if (!idmap_ns_) {
      auto ns = IdMapUserns(CanonicalOwnersMap(config_.SlotRootId(slot_)));
      if (!ns.ok()) return ns.status();
      idmap_ns_ = std::move(ns.value());
    }
    return idmap_ns_.get();
  }

  // The session's disk, attached and mounted idmapped at layout::kDisk.
  Status MountDisk(UniqueFd image) {
    image_ = std::move(image);
    UniqueFd dev;
    std::string node;
    // Another keeper may take the free device between the question and the answer: ask again.
    for (int tries = 0; tries < 20 && !dev; ++tries) {
      int n = ::ioctl(loop_control_.get(), LOOP_CTL_GET_FREE);
      if (n < 0) return ErrnoStatus("LOOP_CTL_GET_FREE");
      node = std::string(kDevs) + "/loop" + std::to_string(n);
      ::unlink(node.c_str());
      if (::mknod(node.c_str(), S_IFBLK | 0600, makedev(7, static_cast<unsigned>(n))) != 0) return ErrnoStatus("mknod " + node);
      UniqueFd d(::open(node.c_str(), O_RDWR | O_CLOEXEC));
      ::unlink(node.c_str());
      if (!d) return ErrnoStatus("open " + node);
      struct loop_config cfg = {};
      cfg.fd = static_cast<uint32_t>(image_.get());
      cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
      if (::ioctl(d.get(), LOOP_CONFIGURE, &cfg) == 0) {
        dev = std::move(d);
      } else if (errno != EBUSY) {
        return ErrnoStatus("LOOP_CONFIGURE");
      }
    }
    if (!dev) return Status::Error("no free loop device");
    std::string src = "/proc/self/fd/" + std::to_string(dev.get());
    // noauto_da_alloc: ext4 would otherwise start writeback of a file's new data when it is
    // closed after an O_TRUNC (or renamed over another), which is every write_file over an
    // existing file; through the loop device that writeback is a second copy of the bytes into
    // the image's page cache (a 1 MiB overwrite cost ~1 ms more machine CPU). The data is
    // written back with everything else (dirty expiry, and at the latest when the session stops:
    // the unmount and the image's fsync below). What it gives up is ext4's guess at a crash of
    // the whole host: a file replaced in the last seconds may then come back empty.
    SP_RETURN_IF_ERROR(Mount(src.c_str(), kRawDisk, "ext4", MS_NOSUID | MS_NODEV, "noauto_da_alloc").Prefixed("session disk"));
    Status s = Status::Ok();
    {
      auto ns = IdMapNamespace();
      UniqueFd raw(::open(kRawDisk, O_PATH | O_DIRECTORY | O_CLOEXEC));
      if (!ns.ok()) s = ns.status();
      else if (!raw) s = ErrnoStatus(std::string("open ") + kRawDisk);
      else s = MountIdmapped(raw.get(), kDisk, *ns, true).Prefixed("session disk");
    }
    // The idmapped mount holds the file system now; the loop device detaches itself once it goes.
    ::umount2(kRawDisk, MNT_DETACH);
    disk_mounted_ = s.ok();
    return s;
  }

  Status Start(const SessionStartMsg& m, UniqueFd image) {
    ++gen_;
    SP_RETURN_IF_ERROR(MountDisk(std::move(image)));
    auto cg = cgroup_.NewSandbox("session-" + std::to_string(gen_));
    if (!cg.ok()) return cg.status().Prefixed("session cgroup");
    SP_RETURN_IF_ERROR(cg->SetLimits(m.memory_bytes, m.pids).Prefixed("session limits"));
    if (m.cpu_quota_us > 0) SP_RETURN_IF_ERROR(cg->SetCpuQuota(m.cpu_quota_us).Prefixed("session cpus"));
    auto sb = PrepareSessionSandbox(config_, slot_, std::move(cg.value()), &seccomp_, m.fresh, SessionInitMain,
                                    nursery_lib_.get());
    if (!sb.ok()) return sb.status();
    sb_ = std::move(sb.value());
    sb_.stdin_w.reset();
    sb_.stdout_r.reset();
    sb_.stderr_r.reset();
    return Status::Ok();
  }

  // Until SessionStop, or the sandbox's death.
  void Serve() {
    std::string why = "stopped";
    for (;;) {
      struct pollfd p[2] = {{ch_.fd(), POLLIN, 0}, {sb_.pidfd.get(), POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) {
        if (errno == EINTR) continue;
        Exit();
      }
      if (p[1].revents) {
        std::string failure = InitFailure(DrainStatus(sb_.status.get()));
        why = failure.empty() ? "the session's sandbox died" : "the session's sandbox failed: " + failure;
        break;
      }
      bool stop = false;
      std::vector<Frame> frames;
      if (!ch_.OnReadable(&frames).ok()) Exit();
      for (Frame& f : frames) {
        if (f.type == static_cast<uint16_t>(SessionMsg::kStop)) stop = true;
        if (f.type == static_cast<uint16_t>(SessionMsg::kStatsRequest)) SendStats();
        if (f.type == static_cast<uint16_t>(SessionMsg::kSnapshot)) Snapshot(f);
      }
      if (stop) break;
    }
    SessionEndedMsg ended;
    ended.generation = gen_;
    ended.why = why;
    if (auto st = sb_.cgroup.Read(); st.ok()) ended.oom_kills = st->oom_kills;
    End();
    // The sandbox's own namespaces died with it and its disk is released; the network namespace
    // is the keeper's, shared with the sandbox, so the next session gets a new one. A network
    // template's slot link is made once per keeper: such a keeper serves one session.
    ended.reusable = !config_.network.enabled && EnterNewNetworkNamespace().ok();
    Send(SessionMsg::kEnded, EncodeMsg(ended));
  }

  // A consistent copy of the running session's disk: its file system is frozen (writers in the
  // session wait; nothing half-written is copied), the image copied sparse, then thawed.
  void Snapshot(Frame& f) {
    SnapshotDoneMsg done;
    if (f.fds.size() != 1 || !image_ || !disk_mounted_) {
      done.error = "no disk to copy";
      Send(SessionMsg::kSnapshotDone, EncodeMsg(done));
      return;
    }
    UniqueFd root(::open(kDisk, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root || ::syncfs(root.get()) != 0 || ::ioctl(root.get(), FIFREEZE, 0) != 0) {
      done.error = ErrnoStatus("freezing the session's file system").message();
      Send(SessionMsg::kSnapshotDone, EncodeMsg(done));
      return;
    }
    auto copied = CopySparse(image_.get(), f.fds[0].get());
    if (::ioctl(root.get(), FITHAW, 0) != 0) LogWarn("thawing a session's file system failed", {{"slot", slot_}});
    if (copied.ok()) done.data_bytes = *copied;
    else done.error = copied.status().message();
    Send(SessionMsg::kSnapshotDone, EncodeMsg(done));
  }

  void SendStats() {
    SessionStatsMsg st;
    if (auto cg = sb_.cgroup.Read(); cg.ok()) {
      st.cpu_usage_us = cg->cpu_usage_us;
      st.oom_kills = cg->oom_kills;
      st.pids_max_hits = cg->pids_max_hits;
    }
    if (auto used = sb_.cgroup.MemoryInUse(); used.ok()) st.memory_bytes = *used;
    st.memory_limit_bytes = sb_.cgroup.memory_limit();
    if (auto procs = sb_.cgroup.ProcessCount(); procs.ok()) st.processes = *procs;
    struct statvfs v;
    if (disk_mounted_ && ::statvfs(kDisk, &v) == 0) {
      st.disk_total_bytes = static_cast<uint64_t>(v.f_blocks) * v.f_frsize;
      st.disk_used_bytes = static_cast<uint64_t>(v.f_blocks - v.f_bfree) * v.f_frsize;
    }
    Send(SessionMsg::kStats, EncodeMsg(st));
  }

  // Ends the current sandbox (if any) and releases its disk, flushed.
  void End() {
    if (sb_.pidfd) {
      KillSandbox(sb_);
      (void)sb_.cgroup.KillAll();
      siginfo_t info;
      ::waitid(P_PIDFD, static_cast<id_t>(sb_.pidfd.get()), &info, WEXITED);
    }
    Status removed = sb_.cgroup.Remove();
    if (!removed.ok()) LogWarn("session cgroup not removed", {{"slot", slot_}, {"error", removed.message()}});
    sb_ = Sandbox();
    if (disk_mounted_) {
      // The sandbox's mounts over the disk went with its mount namespace; a moment may pass
      // before the last reference does.
      int tries = 0;
      while (::umount2(kDisk, 0) != 0 && errno == EBUSY && ++tries < 200) ::usleep(5000);
      if (tries >= 200) {
        // Still held: detached, it is written back only when the last holder lets go. Its data
        // goes to the image now, so that the fsync below covers it (PROTOCOL.md section 17: a
        // stop flushes everything; the disk is mounted noauto_da_alloc, so a file replaced
        // just before the stop may not have been written back yet).
        UniqueFd root(::open(kDisk, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (root) ::syncfs(root.get());
        ::umount2(kDisk, MNT_DETACH);
      }
      disk_mounted_ = false;
    }
    if (image_) {
      ::fsync(image_.get());
      image_.reset();
    }
  }

  const SandboxConfig& config_;
  const uint32_t slot_;
  Channel ch_;
  SlotCgroup cgroup_;
  SeccompProgram seccomp_;
  UniqueFd loop_control_;
  UniqueFd nursery_lib_;  // the session's warm shells come from a shell mother (session_agent.h)
  UniqueFd idmap_ns_;  // IdMapNamespace
  UniqueFd image_;
  bool disk_mounted_ = false;
  Sandbox sb_;
  uint64_t gen_ = 0;
};

}  // namespace

void SessionKeeperMain(const SandboxConfig& config, uint32_t slot, Channel channel, SlotCgroup cgroup,
                       SeccompProgram seccomp, UniqueFd loop_control, UniqueFd nursery_lib) {
  SessionKeeper k(config, slot, std::move(channel), std::move(cgroup), std::move(seccomp), std::move(loop_control),
                  std::move(nursery_lib));
  k.Run();
}

}  // namespace sandpool
