#include "scheduler/sessions/snapshots.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <msgpack.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/clock.h"
#include "common/fd.h"
#include "common/log.h"

namespace sandpool {
namespace {

struct MetaFile {
  std::string name, base, host, checksum;
  int64_t created_ms = 0;
  uint64_t size = 0, data_bytes = 0, chunks = 0, disk_bytes = 0;
  MSGPACK_DEFINE_MAP(name, base, host, checksum, created_ms, size, data_bytes, chunks, disk_bytes)
};

// FNV-1a, 64 bits, over the chunk values in order.
void Fnv(uint64_t* h, std::string_view bytes) {
  for (unsigned char c : bytes) {
    *h ^= c;
    *h *= 1099511628211ull;
  }
}

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void RemoveDir(const std::string& dir) {
  for (const char* f : {"/disk.img", "/meta", "/meta.tmp"}) ::unlink((dir + f).c_str());
  ::rmdir(dir.c_str());
}

uint64_t ToU64(const std::string& s) { return std::strtoull(s.c_str(), nullptr, 10); }

}  // namespace

// One upload or download in progress.
struct Snapshots::Transfer {
  std::string name;
  SnapshotMeta meta;
  UniqueFd fd;
  std::string dir;
  off_t pos = 0;
  uint64_t next_chunk = 0;
  uint64_t hash = 1469598103934665603ull;
  std::function<void(Result<SnapshotMeta>)> done;
};

Snapshots::Snapshots(const DaemonConfig& config, const Keys& keys, RedisAsync* cmd)
    : config_(config), keys_(keys), cmd_(cmd) {}

Status Snapshots::Start() {
  std::string root = config_.state_dir + "/snapshots";
  if (::mkdir(root.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus("mkdir " + root);
  // Staging directories of an earlier run are never finished snapshots.
  if (DIR* d = ::opendir(root.c_str())) {
    while (struct dirent* de = ::readdir(d)) {
      std::string n = de->d_name;
      if (n.rfind("t-", 0) == 0 || n.rfind("d-", 0) == 0) RemoveDir(root + "/" + n);
    }
    ::closedir(d);
  }
  return Status::Ok();
}

Snapshots::~Snapshots() = default;

// "n-", "t-", "d-": names such as ".." only ever name a directory of their own.
std::string Snapshots::Dir(const std::string& name) const { return config_.state_dir + "/snapshots/n-" + name; }
std::string Snapshots::Image(const std::string& name) const { return Dir(name) + "/disk.img"; }
std::string Snapshots::StagingImage(const std::string& name) const {
  return config_.state_dir + "/snapshots/t-" + name + "/disk.img";
}

Status Snapshots::WriteMeta(const SnapshotMeta& m, const std::string& dir) const {
  MetaFile f{m.name, m.base, m.host, m.checksum, m.created_ms, m.size, m.data_bytes, m.chunks, m.disk_bytes};
  msgpack::sbuffer buf;
  msgpack::pack(buf, f);
  UniqueFd fd(::open((dir + "/meta.tmp").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return ErrnoStatus("snapshot meta");
  if (::write(fd.get(), buf.data(), buf.size()) != static_cast<ssize_t>(buf.size()) || ::fsync(fd.get()) != 0) {
    return ErrnoStatus("snapshot meta");
  }
  if (::rename((dir + "/meta.tmp").c_str(), (dir + "/meta").c_str()) != 0) return ErrnoStatus("snapshot meta");
  return Status::Ok();
}

Result<SnapshotMeta> Snapshots::ReadMeta(const std::string& name) const {
  std::ifstream in(Dir(name) + "/meta", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.empty()) return Status::Error("no local copy");
  try {
    MetaFile f;
    msgpack::object_handle oh = msgpack::unpack(bytes.data(), bytes.size());
    oh.get().convert(f);
    struct stat st;
    if (f.name != name || ::stat(Image(name).c_str(), &st) != 0) return Status::Error("incomplete local copy");
    return SnapshotMeta{f.name, f.base, f.host, f.checksum, f.created_ms, f.size, f.data_bytes, f.chunks, f.disk_bytes};
  } catch (...) {
    return Status::Error("unreadable local copy");
  }
}

void Snapshots::RemoveLocal(const std::string& name) const { RemoveDir(Dir(name)); }

void Snapshots::CheckFree(const std::string& name, std::function<void(Status)> done) {
  if (FindTemplate(config_, name) >= 0) {
    done(Status::Error("a template is named " + name, EEXIST));
    return;
  }
  bool sent = cmd_->Command({"EXISTS", keys_.Snapshot(name)}, [name, done](redisReply* r) {
    if (r == nullptr || r->type != REDIS_REPLY_INTEGER) {
      done(Status::Error("Redis did not answer"));
      return;
    }
    done(r->integer == 0 ? Status::Ok() : Status::Error("a snapshot is named " + name, EEXIST));
  });
  if (!sent) done(Status::Error("Redis is not connected"));
}

// ---- Publishing ----------------------------------------------------------------------------------

void Snapshots::Publish(const std::string& name, const std::string& base, uint64_t disk_bytes,
                        std::function<void(Result<SnapshotMeta>)> done) {
  std::string staging = config_.state_dir + "/snapshots/t-" + name;
  RemoveLocal(name);  // a stale copy of a deleted snapshot of that name
  if (::rename(staging.c_str(), Dir(name).c_str()) != 0) {
    Status s = ErrnoStatus("snapshot directory");
    RemoveDir(staging);
    done(s);
    return;
  }
  auto t = std::make_shared<Transfer>();
  t->name = name;
  t->dir = Dir(name);
  t->fd.reset(::open(Image(name).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  struct stat st;
  if (!t->fd || ::fstat(t->fd.get(), &st) != 0) {
    Status s = ErrnoStatus("snapshot image");
    RemoveLocal(name);
    done(s);
    return;
  }
  t->meta.name = name;
  t->meta.base = base;
  t->meta.host = config_.consumer;
  t->meta.created_ms = WallMs();
  t->meta.size = static_cast<uint64_t>(st.st_size);
  t->meta.disk_bytes = disk_bytes;
  t->done = std::move(done);
  UploadNext(t);
}

void Snapshots::UploadNext(std::shared_ptr<Transfer> t) {
  auto fail = [this, t](const Status& why) {
    LogWarn("publishing a snapshot failed", {{"snapshot", t->name}, {"error", why.message()}});
    std::string name = t->name;
    auto done = std::move(t->done);
    Delete(name, [done, why](Status) { done(why); });
  };
  off_t start = ::lseek(t->fd.get(), t->pos, SEEK_DATA);
  if (start < 0 && errno != ENXIO) {
    fail(ErrnoStatus("SEEK_DATA"));
    return;
  }
  if (start < 0 || static_cast<uint64_t>(start) >= t->meta.size) {
    // Every chunk is stored: now the record, which makes the snapshot exist for everyone.
    t->meta.checksum = Hex(t->hash);
    t->meta.chunks = t->next_chunk;
    const SnapshotMeta& m = t->meta;
    std::string key = keys_.Snapshot(m.name);
    bool sent = cmd_->Command(
        {"HSET", key, "name", m.name, "base", m.base, "host", m.host, "created_ms", std::to_string(m.created_ms), "size",
         std::to_string(m.size), "data_bytes", std::to_string(m.data_bytes), "chunks", std::to_string(m.chunks),
         "checksum", m.checksum, "disk_bytes", std::to_string(m.disk_bytes)},
        [this, t, fail](redisReply* r) {
          if (r == nullptr || r->type == REDIS_REPLY_ERROR) {
            fail(Status::Error("storing the snapshot's record failed"));
            return;
          }
          cmd_->Command({"SADD", keys_.Snapshots(), t->name}, [](redisReply*) {});
          Status s = WriteMeta(t->meta, t->dir);
          if (!s.ok()) LogWarn("snapshot meta not written", {{"snapshot", t->name}, {"error", s.message()}});
          LogInfo("snapshot published", {{"snapshot", t->name}, {"bytes", t->meta.data_bytes}, {"chunks", t->meta.chunks}});
          auto done = std::move(t->done);
          done(t->meta);
        });
    if (!sent) fail(Status::Error("Redis is not connected"));
    return;
  }
  off_t end = ::lseek(t->fd.get(), start, SEEK_HOLE);
  if (end < 0) {
    fail(ErrnoStatus("SEEK_HOLE"));
    return;
  }
  size_t want = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, static_cast<uint64_t>(end - start)));
  std::string value(8 + want, '\0');
  for (int i = 0; i < 8; ++i) value[static_cast<size_t>(i)] = static_cast<char>((static_cast<uint64_t>(start) >> (8 * i)) & 0xff);
  ssize_t n = ::pread(t->fd.get(), value.data() + 8, want, start);
  if (n <= 0) {
    fail(ErrnoStatus("reading the snapshot"));
    return;
  }
  value.resize(8 + static_cast<size_t>(n));
  t->meta.data_bytes += static_cast<uint64_t>(n);
  if (t->meta.data_bytes > config_.max_snapshot_bytes) {
    fail(Status::Error("more than --max-snapshot-bytes of data (" + std::to_string(config_.max_snapshot_bytes) + ")", EFBIG));
    return;
  }
  Fnv(&t->hash, value);
  t->pos = start + n;
  std::string key = keys_.Snapshot(t->name) + ":" + std::to_string(t->next_chunk++);
  bool sent = cmd_->Command({"SET", key, std::move(value)}, [this, t, fail](redisReply* r) {
    if (r == nullptr || r->type == REDIS_REPLY_ERROR) {
      fail(Status::Error("storing a snapshot chunk failed"));
      return;
    }
    UploadNext(t);
  });
  if (!sent) fail(Status::Error("Redis is not connected"));
}

// ---- Fetching ------------------------------------------------------------------------------------

void Snapshots::Ensure(const std::string& name, std::function<void(Result<SnapshotMeta>)> done) {
  auto& waiting = ensuring_[name];
  waiting.push_back(std::move(done));
  if (waiting.size() > 1) return;  // a check or download of it is on its way
  bool sent = cmd_->Command({"HGETALL", keys_.Snapshot(name)}, [this, name](redisReply* r) {
    if (r == nullptr || r->type != REDIS_REPLY_ARRAY) {
      FinishEnsure(name, Status::Error("Redis did not answer"));
      return;
    }
    std::map<std::string, std::string> f = ReplyFields(r);
    if (f.empty()) {
      RemoveLocal(name);  // a deleted snapshot's copy, if any
      FinishEnsure(name, Status::Error("no template or snapshot named " + name, ENOENT));
      return;
    }
    SnapshotMeta rec{f["name"], f["base"], f["host"], f["checksum"], static_cast<int64_t>(ToU64(f["created_ms"])),
                     ToU64(f["size"]), ToU64(f["data_bytes"]), ToU64(f["chunks"]), ToU64(f["disk_bytes"])};
    if (rec.data_bytes > config_.max_snapshot_bytes || rec.chunks > config_.max_snapshot_bytes / kChunkBytes + 1) {
      // What this host would not publish, it does not fetch either (--max-snapshot-bytes 0: none).
      FinishEnsure(name, Status::Error("snapshot " + name + " is larger than this host's --max-snapshot-bytes"));
      return;
    }
    auto local = ReadMeta(name);
    if (local.ok() && local->checksum == rec.checksum && local->created_ms == rec.created_ms) {
      FinishEnsure(name, local.value());
      return;
    }
    Download(name, rec);
  });
  if (!sent) FinishEnsure(name, Status::Error("Redis is not connected"));
}

void Snapshots::FinishEnsure(const std::string& name, Result<SnapshotMeta> r) {
  auto waiting = std::move(ensuring_[name]);
  ensuring_.erase(name);
  for (auto& done : waiting) done(r);
}

void Snapshots::Download(const std::string& name, SnapshotMeta record) {
  auto t = std::make_shared<Transfer>();
  t->name = name;
  t->meta = record;
  t->dir = config_.state_dir + "/snapshots/d-" + name;
  RemoveDir(t->dir);
  if (::mkdir(t->dir.c_str(), 0700) != 0) {
    FinishEnsure(name, ErrnoStatus("snapshot download"));
    return;
  }
  t->fd.reset(::open((t->dir + "/disk.img").c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!t->fd || ::ftruncate(t->fd.get(), static_cast<off_t>(record.size)) != 0) {
    Status s = ErrnoStatus("snapshot download");
    RemoveDir(t->dir);
    FinishEnsure(name, s);
    return;
  }
  LogInfo("fetching a snapshot", {{"snapshot", name}, {"from", record.host}, {"bytes", record.data_bytes}});
  DownloadNext(t);
}

void Snapshots::DownloadNext(std::shared_ptr<Transfer> t) {
  auto fail = [this, t](const Status& why) {
    RemoveDir(t->dir);
    FinishEnsure(t->name, why);
  };
  if (t->next_chunk == t->meta.chunks) {
    if (Hex(t->hash) != t->meta.checksum) {
      fail(Status::Error("the snapshot's chunks do not match its checksum"));
      return;
    }
    if (::fsync(t->fd.get()) != 0) {
      fail(ErrnoStatus("snapshot download"));
      return;
    }
    t->fd.reset();
    Status s = WriteMeta(t->meta, t->dir);
    RemoveLocal(t->name);
    if (s.ok() && ::rename(t->dir.c_str(), Dir(t->name).c_str()) != 0) s = ErrnoStatus("snapshot directory");
    if (!s.ok()) {
      fail(s);
      return;
    }
    FinishEnsure(t->name, t->meta);
    return;
  }
  std::string key = keys_.Snapshot(t->name) + ":" + std::to_string(t->next_chunk);
  bool sent = cmd_->Command({"GET", key}, [this, t, fail](redisReply* r) {
    if (r == nullptr || r->type != REDIS_REPLY_STRING || r->len < 8) {
      fail(Status::Error("a chunk of the snapshot is missing"));
      return;
    }
    std::string_view value(r->str, r->len);
    uint64_t offset = 0;
    for (int i = 7; i >= 0; --i) offset = (offset << 8) | static_cast<unsigned char>(value[static_cast<size_t>(i)]);
    std::string_view data = value.substr(8);
    if (offset > t->meta.size || data.size() > t->meta.size - offset) {
      fail(Status::Error("a chunk of the snapshot lies outside its image"));
      return;
    }
    Fnv(&t->hash, value);
    if (::pwrite(t->fd.get(), data.data(), data.size(), static_cast<off_t>(offset)) != static_cast<ssize_t>(data.size())) {
      fail(ErrnoStatus("writing the snapshot"));
      return;
    }
    ++t->next_chunk;
    DownloadNext(t);
  });
  if (!sent) fail(Status::Error("Redis is not connected"));
}

// ---- Deleting ------------------------------------------------------------------------------------

void Snapshots::Delete(const std::string& name, std::function<void(Status)> done) {
  RemoveLocal(name);
  bool sent = cmd_->Command({"HGET", keys_.Snapshot(name), "chunks"}, [this, name, done](redisReply* r) {
    uint64_t chunks = ToU64(ReplyString(r));
    std::vector<std::string> del = {"DEL", keys_.Snapshot(name)};
    // Also chunks of an upload that failed before its record: they are counted from 0 until one
    // is missing (a bounded scan: at most what max-snapshot-bytes allows).
    uint64_t most = std::max<uint64_t>(chunks, config_.max_snapshot_bytes / kChunkBytes + 1);
    for (uint64_t i = 0; i < most; ++i) del.push_back(keys_.Snapshot(name) + ":" + std::to_string(i));
    cmd_->Command(del, [](redisReply*) {});
    cmd_->Command({"SREM", keys_.Snapshots(), name}, [done](redisReply* x) {
      done(x == nullptr ? Status::Error("Redis did not answer") : Status::Ok());
    });
  });
  if (!sent) done(Status::Error("Redis is not connected"));
}

}  // namespace sandpool
