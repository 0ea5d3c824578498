// Mount helpers shared by the keeper (building its base root) and sandbox inits (mounting their
// own file systems), and the layout of the base root's hidden directory. Errors carry the path.
//
// /.sandpool in the base root (never a path an image or a job uses; read-only after set-up):
//   root     a prepared root directory, idmapped to the slot's users (templates with root =)
//   layer    the template's setup layer, idmapped to the slot's users
//   cow      mountpoint of each job sandbox's copy-on-write tmpfs (its uppers)
//   merged   mountpoint of a sandbox's merged root before pivot_root
//   sys/<d>  session keepers: the host's system directory <d>, idmapped (host root -> slot root)
//   etc      session keepers: the synthesized /etc as files (no binds), idmapped likewise
//   skel     mountpoint of a session sandbox's skeleton root (its tmpfs lower)
//   rawdisk  session keepers: where a session's disk is first mounted
//   disk     session keepers: the session's disk, idmapped (canonical 0/1000 -> slot users)
//   devs     session keepers: a tmpfs for the loop device node of a session's disk
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/fd.h"
#include "common/status.h"

namespace sandpool::layout {

inline constexpr const char* kHidden = "/.sandpool";
inline constexpr const char* kLowerRoot = "/.sandpool/root";
inline constexpr const char* kLowerLayer = "/.sandpool/layer";
inline constexpr const char* kCow = "/.sandpool/cow";
inline constexpr const char* kMerged = "/.sandpool/merged";
inline constexpr const char* kSys = "/.sandpool/sys";
inline constexpr const char* kEtc = "/.sandpool/etc";
inline constexpr const char* kEtcSrc = "/.sandpool/etc-src";
inline constexpr const char* kSkel = "/.sandpool/skel";
inline constexpr const char* kRawDisk = "/.sandpool/rawdisk";
inline constexpr const char* kDisk = "/.sandpool/disk";
inline constexpr const char* kDevs = "/.sandpool/devs";

}  // namespace sandpool::layout

namespace sandpool {

Status Mount(const char* src, const std::string& dst, const char* type, unsigned long flags, const char* data);
// mkdir -p: creates `path` and its missing parents with `mode`; existing ones are fine.
Status MkdirP(const std::string& path, mode_t mode);
// Creates (or truncates) a regular file, never following a link at `path`.
Status WriteNewFile(const std::string& path, std::string_view content);
// An overlay at `dst` over `lowers` (top first), with `upper` and `work` directories (existing,
// on one file system); userxattr: overlay keeps its whiteouts and opaque markers in user.*
// xattrs, the only ones a user namespace may set. Its top directory gets the lowest layer's owner
// and mode when the upper is new (empty), so it stays its owner's.
Status MountOverlay(const std::string& dst, const std::vector<std::string>& lowers, const std::string& upper,
                    const std::string& work);
// A user namespace used only as the id mapping of idmapped mounts: `map` ("inside host count"
// lines) becomes its uid_map and gid_map. A throwaway child creates it; its ns file keeps it.
// It costs a fork and two map writes (3-7 ms on a machine where page faults are slow): a
// keeper that mounts with the same map again keeps the namespace.
Result<UniqueFd> IdMapUserns(const std::string& map);
// The map of a slot's canonical owners: uid 0 and kSandboxJobUid (of an image, a session disk, or
// the sandbox's own user namespace) become the slot's sandbox root (`sandbox_root`, a host id)
// and job user (the next id).
std::string CanonicalOwnersMap(uint32_t sandbox_root);
// Mounts a clone of the directory `dir_fd` at `dst`, its file owners translated through `userns`
// (an idmapped mount: the files on disk are not touched); nosuid, nodev, and read-only unless
// `writable`.
Status MountIdmapped(int dir_fd, const std::string& dst, int userns, bool writable = false);

}  // namespace sandpool
