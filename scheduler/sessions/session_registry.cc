#include "scheduler/sessions/session_registry.h"

#include <algorithm>
#include <memory>

#include <msgpack.hpp>

#include "common/log.h"
#include "scheduler/redis/scripts.h"

namespace sandpool {
namespace {

std::string PackMap(const std::vector<std::pair<std::string, std::string>>& kv) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(static_cast<uint32_t>(kv.size()));
  for (const auto& [k, v] : kv) {
    pk.pack(k);
    pk.pack(v);
  }
  return std::string(buf.data(), buf.size());
}

// The record's `options`: the limits it runs with (not its environment's values: their count).
std::string PackOptions(const SessionMeta& m) {
  msgpack::sbuffer opts;
  msgpack::packer<msgpack::sbuffer> pk(opts);
  pk.pack_map(6);
  pk.pack("env"), pk.pack(m.env.size());
  pk.pack("memory_bytes"), pk.pack(m.memory_bytes);
  pk.pack("pids"), pk.pack(m.pids);
  pk.pack("cpus"), pk.pack(m.cpus);
  pk.pack("disk_bytes"), pk.pack(m.disk_bytes);
  pk.pack("idle_timeout_ms"), pk.pack(m.idle_timeout_ms);
  return std::string(opts.data(), opts.size());
}

bool Refused(redisReply* r) { return r == nullptr || r->type == REDIS_REPLY_ERROR; }

}  // namespace

void SessionRegistry::Write(const SessionMeta& m, const SessionRecordState& s, std::function<void(bool)> done) {
  const std::string& me = config_.consumer;
  bool sent = cmd_->Eval(
      kSessionWriteScript,
      {"4", keys_.Session(m.id), keys_.Sessions(), keys_.HostSessions(me), keys_.SessionHosts(), m.id, me,
       "state", s.state, "template", m.template_name, "consumer", me, "created_ms", std::to_string(m.created_ms),
       "last_used_ms", std::to_string(s.last_used_ms), "idle_timeout_ms", std::to_string(m.idle_timeout_ms),
       "max_lifetime_ms", std::to_string(m.max_lifetime_ms), "timeout_at_ms", std::to_string(s.timeout_at_ms),
       "ephemeral", m.ephemeral ? "1" : "0", "labels", PackMap(m.labels), "options", PackOptions(m), "error", s.error},
      [sid = m.id, done](redisReply* r) {
        if (r == nullptr) return;  // the connection dropped: written again on the next connect
        if (r->type == REDIS_REPLY_ERROR) {
          LogWarn("writing a session's record failed", {{"session", sid}, {"error", ReplyString(r)}});
        }
        if (done) done(r->type != REDIS_REPLY_ERROR);
      });
  if (!sent && done) done(false);
}

void SessionRegistry::Forget(const std::string& sid, const std::string& holder) {
  const std::string& h = holder.empty() ? config_.consumer : holder;
  cmd_->Eval(kSessionForgetScript,
             {"3", keys_.Session(sid), keys_.Sessions(), keys_.HostSessions(h), sid, h,
              std::to_string(config_.result_ttl_s)},
             [sid](redisReply* r) {
               if (r != nullptr && r->type == REDIS_REPLY_ERROR) {
                 LogWarn("forgetting a session's record failed", {{"session", sid}, {"error", ReplyString(r)}});
               }
             });
}

void SessionRegistry::Reconcile(std::vector<std::string> held, std::function<void(const std::string&)> destroyed_away,
                                std::function<void()> done) {
  auto held_shared = std::make_shared<std::vector<std::string>>(std::move(held));
  cmd_->Command({"SMEMBERS", keys_.HostSessions(config_.consumer)}, [this, held_shared, destroyed_away,
                                                                      done](redisReply* r) {
    if (r == nullptr || r->type != REDIS_REPLY_ARRAY) {
      if (r != nullptr) LogWarn("listing this host's sessions failed", {{"error", ReplyString(r)}});
      return;  // tried again on the next connect
    }
    const std::vector<std::string>& held_ids = *held_shared;
    for (size_t i = 0; i < r->elements; ++i) {
      std::string sid = ReplyString(r->element[i]);
      if (std::find(held_ids.begin(), held_ids.end(), sid) != held_ids.end()) continue;
      // Its files are not here (it never got a disk, or the state directory was wiped).
      cmd_->Command({"HGET", keys_.Session(sid), "state"}, [this, sid](redisReply* s) {
        if (Refused(s)) return;
        if (ReplyString(s) != "destroyed") {
          LogWarn("session record without files on this host; marked destroyed", {{"session", sid}});
        }
        Forget(sid);
      });
    }
    auto left = std::make_shared<size_t>(held_ids.size());
    auto refused = std::make_shared<bool>(false);
    if (*left == 0) {
      done();
      return;
    }
    for (const std::string& sid : held_ids) {
      cmd_->Command({"HGET", keys_.Session(sid), "state"}, [sid, left, refused, destroyed_away, done](redisReply* s) {
        if (s == nullptr) {
          *refused = true;  // the connection dropped: the whole reconcile runs again on the next connect
        } else if (ReplyString(s) == "destroyed") {
          LogInfo("session destroyed while this host was away; its files are removed", {{"session", sid}});
          destroyed_away(sid);
        }
        if (--*left == 0 && !*refused) done();
      });
    }
  });
}

}  // namespace sandpool
