#include "worker/session/session_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/fd.h"
#include "worker/sandbox/sandbox_config.h"

namespace sandpool {
namespace {

constexpr size_t kMaxPath = 4096;
constexpr size_t kMaxFilesPerWrite = 10000;
constexpr size_t kDefaultListLimit = 10000;
constexpr size_t kMaxListLimit = 100000;

using Packer = msgpack::packer<StringSink>;

// A reply's value, packed straight into the string the reply carries (a read's holds up to 16 MiB
// of the file). Not moved while `sink` is in use (a Packer holds it).
struct Value {
  std::string bytes;
  StringSink sink{&bytes};
};

// The request's fields, read by name (the map is small; a linear scan is fine).
class Fields {
 public:
  explicit Fields(const msgpack::object& map) : map_(map) {}
  const msgpack::object* Get(std::string_view name) const {
    for (uint32_t i = 0; i < map_.via.map.size; ++i) {
      const auto& kv = map_.via.map.ptr[i];
      if (kv.key.type == msgpack::type::STR && std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == name) {
        return &kv.val;
      }
    }
    return nullptr;
  }
  // false (and *why set) when present with the wrong type.
  bool Str(std::string_view name, std::string* out, std::string* why) const {
    const msgpack::object* o = Get(name);
    if (o == nullptr) return true;
    if (o->type != msgpack::type::STR) return Wrong(name, "a string", why);
    out->assign(o->via.str.ptr, o->via.str.size);
    return true;
  }
  // A view of the bytes, valid while the unpacked request is (the whole operation): a file's
  // data is written from where it arrived, not copied first.
  bool Bytes(std::string_view name, std::string_view* out, std::string* why) const {
    const msgpack::object* o = Get(name);
    if (o == nullptr) return true;
    if (o->type == msgpack::type::BIN) *out = std::string_view(o->via.bin.ptr, o->via.bin.size);
    else if (o->type == msgpack::type::STR) *out = std::string_view(o->via.str.ptr, o->via.str.size);
    else return Wrong(name, "bytes", why);
    return true;
  }
  bool Bool(std::string_view name, bool* out, std::string* why) const {
    const msgpack::object* o = Get(name);
    if (o == nullptr) return true;
    if (o->type != msgpack::type::BOOLEAN) return Wrong(name, "a bool", why);
    *out = o->via.boolean;
    return true;
  }
  bool U64(std::string_view name, std::optional<uint64_t>* out, std::string* why) const {
    const msgpack::object* o = Get(name);
    if (o == nullptr) return true;
    if (o->type != msgpack::type::POSITIVE_INTEGER) return Wrong(name, "a uint", why);
    *out = o->via.u64;
    return true;
  }

 private:
  static bool Wrong(std::string_view name, const char* want, std::string* why) {
    *why = std::string(name) + ": not " + want;
    return false;
  }
  const msgpack::object& map_;
};

// The error code of PROTOCOL.md section 19 an errno stands for.
const char* CodeOf(int err) {
  switch (err) {
    case ENOENT: return "not_found";
    case EEXIST: return "exists";
    case EISDIR: return "is_a_directory";
    case ENOTDIR: return "not_a_directory";
    case EACCES:
    case EPERM:
    case EROFS: return "permission";
    case ENOSPC:
    case EDQUOT: return "no_space";
    case EFBIG: return "too_large";
    case ENXIO: return "not_a_file";
    case ELOOP: return "not_found";
    case ENOTEMPTY: return "not_empty";
    default: return "internal";
  }
}

AgentReplyMsg Fail(const char* code, std::string message) {
  AgentReplyMsg r;
  r.error = code;
  r.message = std::move(message);
  return r;
}
AgentReplyMsg FailErrno(int err, const std::string& what) { return Fail(CodeOf(err), what + ": " + std::strerror(err)); }

bool ValidPath(const std::string& p) {
  return !p.empty() && p[0] == '/' && p.size() <= kMaxPath && p.find('\0') == std::string::npos;
}

// File-system operations as the session's job user (fsuid/fsgid 1000: the kernel checks as that
// user, capabilities for file access are dropped) unless the request is for root.
class As {
 public:
  explicit As(bool root) : root_(root) {
    if (!root_) {
      ::setfsgid(kSandboxJobUid);
      ::setfsuid(kSandboxJobUid);
    }
  }
  ~As() {
    if (!root_) {
      ::setfsuid(0);
      ::setfsgid(0);
    }
  }
  As(const As&) = delete;
  As& operator=(const As&) = delete;

 private:
  bool root_;
};

uint64_t Ns(const struct timespec& t) { return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec); }

const char* TypeOf(mode_t m) {
  if (S_ISREG(m)) return "file";
  if (S_ISDIR(m)) return "dir";
  if (S_ISLNK(m)) return "link";
  if (S_ISFIFO(m)) return "fifo";
  if (S_ISSOCK(m)) return "socket";
  if (S_ISCHR(m)) return "char";
  return "block";
}

void PackStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

// mkdir -p of `path`'s parent directories (or of `path` itself when `self`).
int MkdirParents(const std::string& path, mode_t mode, bool self) {
  size_t end = self ? path.size() : path.rfind('/');
  for (size_t i = 1; i <= end && i <= path.size(); ++i) {
    if (i == end || path[i] == '/') {
      std::string part = path.substr(0, i);
      if (part.empty()) continue;
      if (::mkdir(part.c_str(), mode) != 0 && errno != EEXIST) return errno;
    }
  }
  return 0;
}

// Writes all of `data` to a non-blocking fd of a regular file.
int WriteData(int fd, std::string_view data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    off += static_cast<size_t>(n);
  }
  return 0;
}

AgentReplyMsg Done(Value& value) {
  AgentReplyMsg r;
  r.value = std::move(value.bytes);
  return r;
}

// ---- The operations --------------------------------------------------------------------------

AgentReplyMsg Write(const Fields& f) {
  const msgpack::object* files = f.Get("files");
  if (files == nullptr || files->type != msgpack::type::ARRAY) return Fail("bad_field", "files: not an array");
  if (files->via.array.size > kMaxFilesPerWrite) return Fail("too_large", "files: more than 10000");
  size_t total = 0;
  Value buf;
  Packer pk(buf.sink);
  pk.pack_map(1);
  PackStr(pk, "files");
  pk.pack_array(files->via.array.size);
  for (uint32_t i = 0; i < files->via.array.size; ++i) {
    const msgpack::object& item = files->via.array.ptr[i];
    if (item.type != msgpack::type::MAP) return Fail("bad_field", "files[" + std::to_string(i) + "]: not a map");
    Fields file(item);
    std::string path, why;
    std::string_view data;
    std::optional<uint64_t> mode, expected;
    bool parents = true, overwrite = true;
    if (!file.Str("path", &path, &why) || !file.Bytes("data", &data, &why) || !file.U64("mode", &mode, &why) ||
        !file.Bool("parents", &parents, &why) || !file.Bool("overwrite", &overwrite, &why) ||
        !file.U64("expected_mtime_ns", &expected, &why)) {
      return Fail("bad_field", "files[" + std::to_string(i) + "]." + why);
    }
    if (!ValidPath(path)) return Fail("bad_field", "files[" + std::to_string(i) + "].path: not an absolute path");
    if (file.Get("data") == nullptr) return Fail("bad_field", "files[" + std::to_string(i) + "].data: missing");
    total += data.size();
    if (total > kMaxFileData) return Fail("too_large", "files: more than 16 MiB of data in one call");
    std::string at = "files[" + std::to_string(i) + "] " + path;
    if (parents) {
      if (int err = MkdirParents(path, 0755, false)) return FailErrno(err, at);
    }
    struct stat before;
    bool existed = ::stat(path.c_str(), &before) == 0;
    if (expected && (!existed || Ns(before.st_mtim) != *expected)) {
      return Fail("conflict", at + ": changed since the expected modification time");
    }
    if (existed && S_ISDIR(before.st_mode)) return Fail("is_a_directory", at);
    if (existed && !S_ISREG(before.st_mode)) return Fail("not_a_file", at);
    int flags = O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC | (overwrite ? O_TRUNC : O_EXCL);
    UniqueFd fd(::open(path.c_str(), flags, static_cast<mode_t>(mode.value_or(0644) & 07777)));
    if (!fd) return FailErrno(errno, at);
    struct stat st;
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return Fail("not_a_file", at);
    if (mode && existed) ::fchmod(fd.get(), static_cast<mode_t>(*mode & 07777));
    if (int err = WriteData(fd.get(), data)) return FailErrno(err, at);
    if (::fstat(fd.get(), &st) != 0) return FailErrno(errno, at);
    pk.pack_map(3);
    PackStr(pk, "path");
    PackStr(pk, path);
    PackStr(pk, "size");
    pk.pack_uint64(static_cast<uint64_t>(st.st_size));
    PackStr(pk, "mtime_ns");
    pk.pack_uint64(Ns(st.st_mtim));
  }
  return Done(buf);
}

AgentReplyMsg Append(const Fields& f) {
  std::string path, why;
  std::string_view data;
  bool parents = false;
  if (!f.Str("path", &path, &why) || !f.Bytes("data", &data, &why) || !f.Bool("parents", &parents, &why)) {
    return Fail("bad_field", why);
  }
  if (!ValidPath(path)) return Fail("bad_field", "path: not an absolute path");
  if (data.size() > kMaxFileData) return Fail("too_large", "data: more than 16 MiB");
  if (parents) {
    if (int err = MkdirParents(path, 0755, false)) return FailErrno(err, path);
  }
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644));
  if (!fd) return FailErrno(errno, path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return Fail("not_a_file", path);
  if (int err = WriteData(fd.get(), data)) return FailErrno(err, path);
  ::fstat(fd.get(), &st);
  Value buf;
  Packer pk(buf.sink);
  pk.pack_map(2);
  PackStr(pk, "size");
  pk.pack_uint64(static_cast<uint64_t>(st.st_size));
  PackStr(pk, "mtime_ns");
  pk.pack_uint64(Ns(st.st_mtim));
  return Done(buf);
}

AgentReplyMsg Read(const Fields& f) {
  std::string path, why;
  std::optional<uint64_t> offset, length;
  if (!f.Str("path", &path, &why) || !f.U64("offset", &offset, &why) || !f.U64("length", &length, &why)) {
    return Fail("bad_field", why);
  }
  if (!ValidPath(path)) return Fail("bad_field", "path: not an absolute path");
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd) return FailErrno(errno, path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return FailErrno(errno, path);
  if (S_ISDIR(st.st_mode)) return Fail("is_a_directory", path);
  if (!S_ISREG(st.st_mode)) return Fail("not_a_file", path);
  uint64_t size = static_cast<uint64_t>(st.st_size);
  uint64_t off = std::min(offset.value_or(0), size);
  uint64_t want = length ? std::min(*length, size - off) : size - off;
  if (want > kMaxFileData) return Fail("too_large", path + ": more than 16 MiB to read (read it in ranges)");
  std::string data(want, '\0');
  size_t got = 0;
  while (got < want) {
    ssize_t n = ::pread(fd.get(), data.data() + got, want - got, static_cast<off_t>(off + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return FailErrno(errno, path);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  data.resize(got);
  Value buf;
  Packer pk(buf.sink);
  pk.pack_map(3);
  PackStr(pk, "data");
  pk.pack_bin(static_cast<uint32_t>(data.size()));
  pk.pack_bin_body(data.data(), static_cast<uint32_t>(data.size()));
  PackStr(pk, "size");
  pk.pack_uint64(size);
  PackStr(pk, "mtime_ns");
  pk.pack_uint64(Ns(st.st_mtim));
  return Done(buf);
}

void PackStat(Packer& pk, const std::string& path, const std::string* name, const struct stat& st) {
  std::string target;
  if (S_ISLNK(st.st_mode)) {
    char t[4096];
    ssize_t n = ::readlink(path.c_str(), t, sizeof t);
    if (n > 0) target.assign(t, static_cast<size_t>(n));
  }
  pk.pack_map(name ? 11 : 10);
  PackStr(pk, "path");
  PackStr(pk, path);
  if (name) {
    PackStr(pk, "name");
    PackStr(pk, *name);
  }
  PackStr(pk, "type");
  PackStr(pk, TypeOf(st.st_mode));
  PackStr(pk, "size");
  pk.pack_uint64(static_cast<uint64_t>(st.st_size));
  PackStr(pk, "mode");
  pk.pack_uint64(st.st_mode & 07777);
  PackStr(pk, "mtime_ns");
  pk.pack_uint64(Ns(st.st_mtim));
  PackStr(pk, "atime_ns");
  pk.pack_uint64(Ns(st.st_atim));
  PackStr(pk, "ctime_ns");
  pk.pack_uint64(Ns(st.st_ctim));
  PackStr(pk, "target");
  if (S_ISLNK(st.st_mode)) PackStr(pk, target);
  else pk.pack_nil();
  PackStr(pk, "uid");
  pk.pack_uint64(st.st_uid);
  PackStr(pk, "gid");
  pk.pack_uint64(st.st_gid);
}

AgentReplyMsg Stat(const Fields& f) {
  std::string path, why;
  bool follow = false;
  if (!f.Str("path", &path, &why) || !f.Bool("follow", &follow, &why)) return Fail("bad_field", why);
  if (!ValidPath(path)) return Fail("bad_field", "path: not an absolute path");
  struct stat st;
  if ((follow ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0) return FailErrno(errno, path);
  Value buf;
  Packer pk(buf.sink);
  PackStat(pk, path, nullptr, st);
  return Done(buf);
}

AgentReplyMsg Exists(const Fields& f) {
  std::string path, why;
  if (!f.Str("path", &path, &why)) return Fail("bad_field", why);
  if (!ValidPath(path)) return Fail("bad_field", "path: not an absolute path");
  struct stat st;
  bool there = ::lstat(path.c_str(), &st) == 0;
  if (!there && errno != ENOENT && errno != ENOTDIR) return FailErrno(errno, path);
  Value buf;
  Packer pk(buf.sink);
  pk.pack_map(2);
  PackStr(pk, "exists");
  pk.pack(there);
  PackStr(pk, "type");
  if (there) PackStr(pk, TypeOf(st.st_mode));
  else pk.pack_nil();
  return Done(buf);
}

AgentReplyMsg List(const Fields& f) {
  std::string path, why;
  bool recursive = false;
  std::optional<uint64_t> depth, limit;
  if (!f.Str("path", &path, &why) || !f.Bool("recursive", &recursive, &why) || !f.U64("depth", &depth, &why) ||
      !f.U64("limit", &limit, &why)) {
    return Fail("bad_field", why);
  }
  if (!ValidPath(path)) return Fail("bad_field", "path: not an absolute path");
  uint64_t max_depth = depth.value_or(recursive ? 64 : 1);
  uint64_t max_entries = std::min<uint64_t>(limit.value_or(kDefaultListLimit), kMaxListLimit);
  struct Entry {
    std::string path, name;
    struct stat st;
  };
  std::vector<Entry> entries;
  bool truncated = false;
  int first_err = 0;
  std::function<void(const std::string&, uint64_t)> walk = [&](const std::string& dir, uint64_t level) {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) {
      if (level == 1) first_err = errno;
      return;
    }
    std::vector<std::string> names;
    while (struct dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    for (const std::string& n : names) {
      if (entries.size() >= max_entries) {
        truncated = true;
        return;
      }
      std::string p = dir == "/" ? "/" + n : dir + "/" + n;
      Entry e{p, n, {}};
      if (::lstat(p.c_str(), &e.st) != 0) continue;
      bool is_dir = S_ISDIR(e.st.st_mode);
      entries.push_back(std::move(e));
      if (is_dir && level < max_depth) walk(p, level + 1);
    }
  };
  struct stat top;
  if (::stat(path.c_str(), &top) != 0) return FailErrno(errno, path);
  if (!S_ISDIR(top.st_mode)) return Fail("not_a_directory", path);
  walk(path, 1);
  if (first_err != 0) return FailErrno(first_err, path);
  Value buf;
  Packer pk(buf.sink);
  pk.pack_map(2);
  PackStr(pk, "entries");
  pk.pack_array(static_cast<uint32_t>(entries.size()));
  for (const Entry& e : entries) PackStat(pk, e.path, &e.name, e.st);
  PackStr(pk, "truncated");
  pk.pack(truncated);
  return Done(buf);
}

AgentReplyMsg Mkdir(const Fields& f) {
  std::string path, why;
  bool parents = true;
  std::optional<uint64_t> mode;
  if (!f.Str("path", &path, &why) || !f.Bool("parents", &parents, &why) || !f.U64("mode", &mode, &why)) {
    return Fail("bad_field", why);
  }
  if (!ValidPath(path)) return Fail("bad_field", "path: not an absolute path");
  mode_t m = static_cast<mode_t>(mode.value_or(0755) & 07777);
  if (parents) {
    if (int err = MkdirParents(path, m, true)) return FailErrno(err, path);
  } else if (::mkdir(path.c_str(), m) != 0 && errno != EEXIST) {
    return FailErrno(errno, path);
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return FailErrno(errno, path);
  if (!S_ISDIR(st.st_mode)) return Fail("not_a_directory", path + ": exists and is not a directory");
  Value buf;
  Packer pk(buf.sink);
  pk.pack_map(0);
  return Done(buf);
}

// Removes `path` (a tree if `recursive`); counts what went.
int RemoveTree(const std::string& path, bool recursive, uint64_t* removed) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return errno;
  if (S_ISDIR(st.st_mode)) {
    if (recursive) {
      DIR* d = ::opendir(path.c_str());
      if (d == nullptr) return errno;
      std::vector<std::string> names;
      while (struct dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") names.push_back(n);
      }
      ::closedir(d);
      for (const std::string& n : names) {
        if (int err = RemoveTree(path + "/" + n, true, removed)) return err;
      }
    }
    if (::rmdir(path.c_str()) != 0) return errno;
  } else if (::unlink(path.c_str()) != 0) {
    return errno;
  }
  ++*removed;
  return 0;
}

AgentReplyMsg Remove(const Fields& f) {
  std::string path, why;
  bool recursive = false, force = false;
  if (!f.Str("path", &path, &why) || !f.Bool("recursive", &recursive, &why) || !f.Bool("force", &force, &why)) {
    return Fail("bad_field", why);
  }
  if (!ValidPath(path) || path == "/") return Fail("bad_field", "path: not an absolute path (or /)");
  uint64_t removed = 0;
  int err = RemoveTree(path, recursive, &removed);
  if (err == ENOENT && force) err = 0;
  if (err == ENOTEMPTY || err == EEXIST) return Fail("not_empty", path + ": directory not empty (remove it recursively)");
  if (err != 0) return FailErrno(err, path);
  Value buf;
  Packer pk(buf.sink);
  pk.pack_map(1);
  PackStr(pk, "removed");
  pk.pack_uint64(removed);
  return Done(buf);
}

int CopyTree(const std::string& from, const std::string& to, bool recursive, bool overwrite, int depth) {
  if (depth > 64) return ELOOP;
  struct stat st;
  if (::lstat(from.c_str(), &st) != 0) return errno;
  if (!overwrite && ::access(to.c_str(), F_OK) == 0) return EEXIST;
  if (S_ISLNK(st.st_mode)) {
    char t[4096];
    ssize_t n = ::readlink(from.c_str(), t, sizeof t - 1);
    if (n < 0) return errno;
    t[n] = '\0';
    if (overwrite) ::unlink(to.c_str());
    return ::symlink(t, to.c_str()) == 0 ? 0 : errno;
  }
  if (S_ISDIR(st.st_mode)) {
    if (!recursive) return EISDIR;
    if (::mkdir(to.c_str(), st.st_mode & 07777) != 0 && errno != EEXIST) return errno;
    DIR* d = ::opendir(from.c_str());
    if (d == nullptr) return errno;
    std::vector<std::string> names;
    while (struct dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
    for (const std::string& n : names) {
      if (int err = CopyTree(from + "/" + n, to + "/" + n, true, overwrite, depth + 1)) return err;
    }
    return 0;
  }
  if (!S_ISREG(st.st_mode)) return ENXIO;  // FIFOs, sockets and devices are not copied
  UniqueFd in(::open(from.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!in) return errno;
  UniqueFd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_CLOEXEC, st.st_mode & 07777));
  if (!out) return errno;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(in.get(), buf, sizeof buf);
    if (n < 0) return errno;
    if (n == 0) break;
    if (int err = WriteData(out.get(), std::string_view(buf, static_cast<size_t>(n)))) return err;
  }
  return 0;
}

AgentReplyMsg Copy(const Fields& f) {
  std::string from, to, why;
  bool recursive = false, overwrite = false;
  if (!f.Str("from", &from, &why) || !f.Str("to", &to, &why) || !f.Bool("recursive", &recursive, &why) ||
      !f.Bool("overwrite", &overwrite, &why)) {
    return Fail("bad_field", why);
  }
  if (!ValidPath(from) || !ValidPath(to)) return Fail("bad_field", "from, to: absolute paths");
  if (to == from || to.rfind(from + "/", 0) == 0) return Fail("bad_field", "to: inside from");
  if (int err = CopyTree(from, to, recursive, overwrite, 0)) return FailErrno(err, from + " -> " + to);
  Value buf;
  Packer pk(buf.sink);
  pk.pack_map(0);
  return Done(buf);
}

AgentReplyMsg Rename(const Fields& f) {
  std::string from, to, why;
  bool overwrite = false;
  if (!f.Str("from", &from, &why) || !f.Str("to", &to, &why) || !f.Bool("overwrite", &overwrite, &why)) {
    return Fail("bad_field", why);
  }
  if (!ValidPath(from) || !ValidPath(to)) return Fail("bad_field", "from, to: absolute paths");
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), overwrite ? 0 : RENAME_NOREPLACE) != 0) {
    int err = errno;
    if (err == EXDEV) {
      // Across overlays (the session's directories are several): copy, then remove.
      if (int e = CopyTree(from, to, true, overwrite, 0)) return FailErrno(e, from + " -> " + to);
      uint64_t removed = 0;
      if (int e = RemoveTree(from, true, &removed)) return FailErrno(e, from);
    } else {
      return FailErrno(err, from + " -> " + to);
    }
  }
  Value buf;
  Packer pk(buf.sink);
  pk.pack_map(0);
  return Done(buf);
}

struct Operation {
  std::string_view name;
  AgentReplyMsg (*run)(const Fields&);
};
constexpr Operation kOperations[] = {
    {"write", Write}, {"append", Append}, {"read", Read},     {"list", List},     {"stat", Stat},
    {"exists", Exists}, {"mkdir", Mkdir}, {"remove", Remove}, {"copy", Copy},     {"rename", Rename},
};

}  // namespace

AgentReplyMsg RunFileOperation(std::string_view request) {
  try {
    msgpack::unpack_limit limit(kMaxFilesPerWrite + 1, 64, kMaxFileData + 1, kMaxFileData + 1, 0, 6);
    size_t off = 0;
    size_t bytes = kMaxFileData + 1;
    msgpack::object_handle oh = msgpack::unpack(request.data(), request.size(), off, &ReferenceUpTo, &bytes, limit);
    const msgpack::object& root = oh.get();
    if (root.type != msgpack::type::MAP) return Fail("bad_payload", "not a map");
    Fields f(root);
    std::string op, why;
    bool as_root = false;
    if (!f.Str("op", &op, &why) || !f.Bool("as_root", &as_root, &why)) return Fail("bad_field", why);
    for (const Operation& o : kOperations) {
      if (o.name == op) {
        As as(as_root);
        return o.run(f);
      }
    }
    return Fail("bad_field", "op: not a file operation");
  } catch (const msgpack::size_overflow&) {
    return Fail("too_large", "the request is over a limit");
  } catch (const std::exception& e) {
    return Fail("bad_payload", e.what());
  }
}

}  // namespace sandpool
