#include "scheduler/sessions/session_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "common/fd.h"
#include "common/log.h"

namespace sandpool {

std::optional<EgressRequest> SessionMeta::Egress() const {
  if (!egress) return std::nullopt;
  EgressRequest r;
  if (egress_allow_set) r.allow = egress_allow;
  r.deny = egress_deny;
  return r;
}

void SessionMeta::SetEgress(const std::optional<EgressRequest>& request) {
  egress = request.has_value();
  egress_allow_set = egress && request->allow.has_value();
  egress_allow = egress_allow_set ? *request->allow : std::vector<std::string>{};
  egress_deny = egress ? request->deny : std::vector<std::string>{};
}

Status SessionStore::Init() const {
  for (const std::string& d : {state_dir_, root_}) {
    if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus("mkdir " + d);
  }
  return Status::Ok();
}

Status SessionStore::Save(const SessionMeta& m) const {
  msgpack::sbuffer buf;
  msgpack::pack(buf, m);
  std::string dir = Dir(m.id);
  std::string tmp = dir + "/meta.tmp";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return ErrnoStatus("open " + tmp);
  if (::write(fd.get(), buf.data(), buf.size()) != static_cast<ssize_t>(buf.size()) || ::fsync(fd.get()) != 0) {
    return ErrnoStatus("write " + tmp);
  }
  fd.reset();
  if (::rename(tmp.c_str(), (dir + "/meta").c_str()) != 0) return ErrnoStatus("rename " + tmp);
  return Status::Ok();
}

std::vector<SessionMeta> SessionStore::LoadAll(const DaemonConfig& config) const {
  std::vector<SessionMeta> out;
  DIR* d = ::opendir(root_.c_str());
  if (d == nullptr) return out;
  std::vector<std::string> names;
  while (struct dirent* de = ::readdir(d)) names.emplace_back(de->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    std::string dir = root_ + "/" + name;
    if (name.rfind("w-", 0) == 0) {
      RemoveDir(dir);  // a warm spare of an earlier run: never a session's, nothing to keep
      continue;
    }
    if (name.rfind("s-", 0) != 0) continue;
    std::string sid = name.substr(2);
    SessionMeta m;
    bool ok = false;
    if (ValidJobId(sid)) {
      UniqueFd fd(::open((dir + "/meta").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
      std::string bytes;
      char chunk[4096];
      ssize_t n;
      while (fd.valid() && (n = ::read(fd.get(), chunk, sizeof chunk)) > 0) bytes.append(chunk, static_cast<size_t>(n));
      try {
        msgpack::object_handle oh = msgpack::unpack(bytes.data(), bytes.size());
        oh.get().convert(m);
        ok = m.id == sid;
      } catch (...) {
      }
    }
    if (ok && m.base.empty()) m.base = m.template_name;
    struct stat st;
    if (!ok || ::stat((dir + "/disk.img").c_str(), &st) != 0 || FindTemplate(config, m.base) < 0) {
      LogWarn("session files incomplete; removed", {{"session", sid}, {"dir", dir}});
      if (ValidJobId(sid)) Remove(sid);
      continue;
    }
    out.push_back(std::move(m));
  }
  if (!out.empty()) LogInfo("sessions found on disk (stopped)", {{"count", static_cast<uint64_t>(out.size())}});
  return out;
}

void SessionStore::Remove(const std::string& sid) const {
  std::string dir = Dir(sid);
  for (const char* f : {"/disk.img", "/meta", "/meta.tmp"}) ::unlink((dir + f).c_str());
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
    LogWarn("session directory not removed", {{"dir", dir}, {"error", std::strerror(errno)}});
  }
}

void SessionStore::RemoveDir(const std::string& dir) {
  // The image is unmounted by the keeper when its sandbox ends; removing the file while it is
  // still mounted is harmless (the space returns when the loop device lets go).
  ::unlink((dir + "/disk.img").c_str());
  ::rmdir(dir.c_str());
}

}  // namespace sandpool
