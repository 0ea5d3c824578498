// A session's files on this host's disk (docs/ARCHITECTURE.md, "Sessions"): the directory
// `<state-dir>/sessions/s-<sid>/` holds `disk.img` (the session's files, a filesystem image the
// host never looks inside) and `meta` (what it was created with: SessionMeta, msgpack, written
// atomically). Warm spares live in `w-<n>` directories of the same folder.
//
// The host never follows a path a session controls: every path here is made from names this
// daemon chose ("s-" + a validated id, "w-" + a number), and files are opened O_NOFOLLOW.
//
// Not thread-safe; loop thread only. Blocking file I/O (small files, local disk).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <msgpack.hpp>

#include "common/status.h"
#include "queue/protocol.h"
#include "scheduler/config/config.h"

namespace sandpool {

// What a session was created with: its record's `options` in Redis and its `meta` file. The
// field names are the file's keys (kept across versions: a file written by an older daemon
// loads).
struct SessionMeta {
  std::string id, template_name;
  std::vector<std::pair<std::string, std::string>> env, labels;
  uint64_t memory_bytes = 0, pids = 0, disk_bytes = 0;
  double cpus = 0;
  uint64_t idle_timeout_ms = 0, max_lifetime_ms = 0;
  bool ephemeral = false;
  int64_t created_ms = 0;
  std::string base;  // the configured template it runs on (template_name, or a snapshot's base)
  // Its own narrowing of its template's policy (kept for resumes), flattened for the file:
  // `egress` says whether there is one, `egress_allow_set` whether it names an allow list.
  bool egress = false, egress_allow_set = false;
  std::vector<std::string> egress_allow, egress_deny;

  std::optional<EgressRequest> Egress() const;
  void SetEgress(const std::optional<EgressRequest>& request);

  MSGPACK_DEFINE_MAP(id, template_name, env, labels, memory_bytes, pids, disk_bytes, cpus, idle_timeout_ms,
                     max_lifetime_ms, ephemeral, created_ms, base, egress, egress_allow_set, egress_allow, egress_deny)
};

class SessionStore {
 public:
  // REQUIRES: `state_dir` outlives the store.
  explicit SessionStore(const std::string& state_dir) : root_(state_dir + "/sessions"), state_dir_(state_dir) {}

  // Makes the state directory and its sessions folder (0700) if missing.
  Status Init() const;
  // The session's directory ("s-" keeps ids such as ".." from naming anything but a directory
  // of their own). REQUIRES: ValidJobId(sid).
  std::string Dir(const std::string& sid) const { return root_ + "/s-" + sid; }
  // A new warm spare's directory (w-<n>; never a session's).
  std::string SpareDir(uint64_t n) const { return root_ + "/w-" + std::to_string(n); }
  // Writes `m` as the meta file of its directory (which must exist): temp file, fsync, rename.
  Status Save(const SessionMeta& m) const;
  // Every session found on disk, with a meta file that reads, names its own directory, and a
  // disk image; the template its meta names must be configured (`base` filled in for files that
  // predate it). What is incomplete is removed (logged), and so are spares of an earlier run.
  std::vector<SessionMeta> LoadAll(const DaemonConfig& config) const;
  // Removes the session's files and directory: only names this daemon made.
  void Remove(const std::string& sid) const;
  // Removes a spare's (or any directory of this folder's) disk image and the directory.
  static void RemoveDir(const std::string& dir);

 private:
  std::string root_;
  const std::string& state_dir_;
};

}  // namespace sandpool
