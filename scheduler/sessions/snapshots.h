// Snapshot templates (PROTOCOL.md section 18): a session's disk, frozen into a named template that
// new sessions start from, on any host.
//
// A snapshot is a sparse copy of a session's disk image (taken by its keeper with the file system
// frozen, or by the spawner from a stopped session's image), kept in
// `<state-dir>/snapshots/n-<name>/disk.img` beside `meta`, and published to Redis: the record
// `<p>:snapshot:<name>` (name, base template, host, created_ms, size, data_bytes, chunks,
// checksum, disk_bytes) and the image's data extents in chunks `<p>:snapshot:<name>:<n>` (8 bytes
// little-endian offset, then up to 1 MiB of data; holes are not stored). Another host *fetches the
// same content*: the first time a session names the snapshot there, the chunks are read back
// into a sparse image and checked against the record's checksum (FNV-1a 64 of the chunk values in
// order: an integrity check, not a signature: whoever can write Redis can run code anyway).
//
// Uploads and downloads go one chunk per round trip through the daemon's loop, so a large
// snapshot never blocks it for long.
//
// Ownership: Sessions owns it. Loop thread only.
#pragma once


#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "queue/keys.h"
#include "scheduler/config/config.h"
#include "scheduler/redis/redis_async.h"

namespace sandpool {

struct SnapshotMeta {
  std::string name, base, host, checksum;
  int64_t created_ms = 0;
  uint64_t size = 0, data_bytes = 0, chunks = 0, disk_bytes = 0;
};

class Snapshots {
 public:
  static constexpr uint64_t kChunkBytes = 1u << 20;

  Snapshots(const DaemonConfig& config, const Keys& keys, RedisAsync* cmd);
  ~Snapshots();
  Snapshots(const Snapshots&) = delete;
  Snapshots& operator=(const Snapshots&) = delete;

  // Makes <state>/snapshots and removes what an earlier run left half-made there. REQUIRES the
  // state directory exists (Sessions::Start makes it); before this, nothing else may be called.
  Status Start();

  // Where a snapshot being taken is written (a new file; the directory is made by the spawner or
  // here), and where a finished one lives.
  std::string StagingImage(const std::string& name) const;
  std::string Image(const std::string& name) const;

  // Checks that `name` may be taken (no snapshot and no configured template has it): done(ok, or
  // an error Status whose message says why; sys_errno EEXIST when it is taken).
  void CheckFree(const std::string& name, std::function<void(Status)> done);
  // The staged image is finished: it becomes the snapshot (local directory, then the chunks, then
  // the record, so a record always has all its chunks). done(its meta, or why not; the staged
  // files are removed on failure).
  void Publish(const std::string& name, const std::string& base, uint64_t disk_bytes,
               std::function<void(Result<SnapshotMeta>)> done);
  // Makes sure the snapshot's current content is on this host (fetched from Redis if it is not,
  // or if the record changed). done(its meta, or not_found / why not).
  void Ensure(const std::string& name, std::function<void(Result<SnapshotMeta>)> done);
  // Removes the record, the chunks and the local copy. Idempotent.
  void Delete(const std::string& name, std::function<void(Status)> done);

 private:
  struct Transfer;
  std::string Dir(const std::string& name) const;
  Status WriteMeta(const SnapshotMeta& m, const std::string& dir) const;
  Result<SnapshotMeta> ReadMeta(const std::string& name) const;
  void RemoveLocal(const std::string& name) const;
  void UploadNext(std::shared_ptr<Transfer> t);
  void Download(const std::string& name, SnapshotMeta record);
  void DownloadNext(std::shared_ptr<Transfer> t);
  void FinishEnsure(const std::string& name, Result<SnapshotMeta> r);

  const DaemonConfig& config_;
  const Keys& keys_;
  RedisAsync* cmd_;
  // Ensures waiting for a download of the same name.
  std::map<std::string, std::vector<std::function<void(Result<SnapshotMeta>)>>> ensuring_;
};

}  // namespace sandpool
