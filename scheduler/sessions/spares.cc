#include "scheduler/sessions/spares.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "common/status.h"

namespace sandpool {

SessionMeta SessionSpares::DefaultMeta(uint32_t t) const {
  const TemplateConfig& tc = config_.templates[t];
  SessionMeta m;
  m.template_name = tc.name;
  m.memory_bytes = tc.sandbox.cgroup.memory_bytes;
  m.pids = tc.sandbox.cgroup.pids;
  m.cpus = static_cast<double>(tc.sandbox.cgroup.cpu_quota_us) / 100000.0;
  m.disk_bytes = limits_.default_disk_bytes;
  return m;
}

void SessionSpares::Make(const std::string& name, uint32_t t, const std::string& image, uint64_t disk_bytes,
                         const std::string& version) {
  // At most one per template, and a few in all: each holds a sandbox of the budget.
  if (config_.session_spares == 0 || draining_ || spares_.count(name) || spares_.size() >= kMostSpares) return;
  SessionMeta m = DefaultMeta(t);
  m.template_name = name;
  m.disk_bytes = disk_bytes;
  // A spare is a running sandbox: it holds its share of the budget, and only if there is room.
  if (!host_->TakeSessionBudget(m.memory_bytes)) return;
  Spare& sp = spares_[name];
  sp.t = t;
  sp.defaults = m;
  sp.version = version;
  sp.dir = store_.SpareDir(next_spare_++);
  if (::mkdir(sp.dir.c_str(), 0700) != 0) {
    Drop(name, ErrnoStatus("mkdir " + sp.dir).message());
    return;
  }
  std::string dir = sp.dir;
  bool fresh = image.empty();
  host_->MakeDisk(dir + "/disk.img", m.disk_bytes, image, [this, name, t, dir, m, fresh](std::string error, uint64_t) {
    auto it = spares_.find(name);
    if (it == spares_.end() || it->second.dir != dir) {
      SessionStore::RemoveDir(dir);  // given up while its disk was being made
      return;
    }
    if (!error.empty()) {
      Drop(name, "its disk: " + error);
      return;
    }
    TakeKeeper(t, [this, name, t, dir, m, fresh](SessionHost::KeeperHandle k) {
      auto found = spares_.find(name);
      if (found == spares_.end() || found->second.dir != dir || found->second.session) {
        host_->ReleaseSessionSlot(k.slot);
        return;
      }
      std::string why;
      found->second.session = hooks_.start_sandbox(found->second.owner, t, m, dir, fresh, std::move(k), &why);
      if (!found->second.session) Drop(name, why);
    });
  });
}

void SessionSpares::Ready(const std::string& name) {
  auto it = spares_.find(name);
  if (it != spares_.end()) it->second.ready = true;
}

void SessionSpares::Drop(const std::string& name, const std::string& why) {
  auto it = spares_.find(name);
  if (it == spares_.end()) return;
  Spare sp = std::move(it->second);
  spares_.erase(it);
  if (!why.empty() && why != "stopped") LogWarn("warm session sandbox lost", {{"template", name}, {"why", why}});
  host_->ReturnSessionBudget(sp.defaults.memory_bytes);
  if (sp.session) {
    host_->ReleaseSessionSlot(sp.session->keeper_slot());
    if (!sp.session->ended()) sp.session->Stop();
    hooks_.collect(std::move(sp.session));
  }
  SessionStore::RemoveDir(sp.dir);
}

bool SessionSpares::DropOne() {
  if (spares_.empty()) return false;
  Drop(spares_.begin()->first, "");
  return true;
}

std::unique_ptr<Session> SessionSpares::Adopt(const SessionMeta& m, const std::string& version) {
  auto it = spares_.find(m.template_name);
  if (it == spares_.end() || !it->second.ready || !it->second.session || !it->second.session->ready()) return nullptr;
  const SessionMeta& d = it->second.defaults;
  if (it->second.version != version) {
    Drop(m.template_name, "");  // made from an older snapshot of that name
    return nullptr;
  }
  if (m.memory_bytes != d.memory_bytes || m.pids != d.pids || m.cpus != d.cpus || m.disk_bytes != d.disk_bytes) {
    return nullptr;  // it asked for its own limits: a sandbox made for it
  }
  if (::rename(it->second.dir.c_str(), store_.Dir(m.id).c_str()) != 0) {
    LogWarn("adopting a warm session sandbox failed", {{"session", m.id}, {"error", std::strerror(errno)}});
    return nullptr;
  }
  Spare sp = std::move(it->second);
  spares_.erase(it);
  *sp.owner = m.id;
  sp.session->Adopt(m.id, m.env);
  return std::move(sp.session);
}

void SessionSpares::TakeKeeper(uint32_t t, std::function<void(SessionHost::KeeperHandle)> done) {
  auto& ahead = keepers_ahead_[t];
  if (!ahead.empty()) {
    SessionHost::KeeperHandle k = std::move(ahead.back());
    ahead.pop_back();
    KeeperAhead(t);
    done(std::move(k));
    return;
  }
  host_->SpawnSessionKeeper(t, std::move(done));
  KeeperAhead(t);
}

void SessionSpares::KeepKeeper(uint32_t t, SessionHost::KeeperHandle k) {
  auto& ahead = keepers_ahead_[t];
  if (!draining_ && k.channel.valid() && ahead.size() < kMostKeepersAhead &&
      host_->FreeSessionSlots() >= config_.templates.size()) {
    ahead.push_back(std::move(k));
    return;
  }
  host_->ReleaseSessionSlot(k.slot);  // its channel closes with `k`: the keeper exits
}

void SessionSpares::KeeperAhead(uint32_t t) {
  if (draining_ || keeper_pending_.count(t) || !keepers_ahead_[t].empty()) return;
  keeper_pending_.insert(t);
  host_->SpawnSessionKeeper(t, [this, t](SessionHost::KeeperHandle k) {
    keeper_pending_.erase(t);
    if (!k.channel.valid() || draining_) {
      host_->ReleaseSessionSlot(k.slot);
      return;
    }
    keepers_ahead_[t].push_back(std::move(k));
  });
}

void SessionSpares::Drain() {
  draining_ = true;
  while (DropOne()) {
  }
  for (auto& [t, ahead] : keepers_ahead_) {
    for (auto& k : ahead) host_->ReleaseSessionSlot(k.slot);
    ahead.clear();
  }
}

void SessionSpares::Close() {
  while (DropOne()) {
  }
  keepers_ahead_.clear();
}

}  // namespace sandpool
