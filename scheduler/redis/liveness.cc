#include "scheduler/redis/liveness.h"

#include <cstdlib>
#include <memory>

#include "common/log.h"

namespace sandpool {

std::set<std::string> LiveConsumers(const std::string& list, const std::string& prefix) {
  std::set<std::string> out;
  const std::string head = "sandpoold:" + prefix + ":";
  size_t pos = 0;
  while ((pos = list.find(" name=", pos)) != std::string::npos) {
    pos += 6;
    size_t end = list.find_first_of(" \n", pos);
    std::string name = list.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (name.rfind(head, 0) == 0) {
      std::string rest = name.substr(head.size());
      size_t colon = rest.rfind(':');
      if (colon != std::string::npos) out.insert(rest.substr(0, colon));
    }
  }
  return out;
}

bool FindLiveDaemons(RedisAsync* cmd, const Keys& keys, const DaemonConfig& config,
                     std::function<void(std::optional<std::set<std::string>>)> done) {
  auto shared = std::make_shared<std::function<void(std::optional<std::set<std::string>>)>>(std::move(done));
  return cmd->Command({"INFO", "server"}, [cmd, &keys, &config, shared](redisReply* info) {
    std::string text = ReplyString(info);
    size_t at = text.find("uptime_in_seconds:");
    if (info == nullptr || info->type == REDIS_REPLY_ERROR || at == std::string::npos ||
        std::strtoull(text.c_str() + at + 18, nullptr, 10) * 1000 < config.lease_ms) {
      (*shared)(std::nullopt);
      return;
    }
    bool sent = cmd->Command({"CLIENT", "LIST", "TYPE", "normal"}, [&keys, &config, shared](redisReply* r) {
      if (r == nullptr || r->type == REDIS_REPLY_ERROR) {
        if (r != nullptr) LogWarn("CLIENT LIST failed; no daemon is judged gone", {{"error", ReplyString(r)}});
        (*shared)(std::nullopt);
        return;
      }
      std::set<std::string> alive = LiveConsumers(ReplyString(r), keys.prefix());
      alive.insert(config.consumer);
      (*shared)(std::move(alive));
    });
    if (!sent) (*shared)(std::nullopt);
  });
}

}  // namespace sandpool
