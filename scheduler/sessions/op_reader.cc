#include "scheduler/sessions/op_reader.h"

#include "common/log.h"

namespace sandpool {
namespace {

constexpr int kBlockMs = 1000;
constexpr size_t kReadBatch = 16;
constexpr size_t kScanBatch = 100;

}  // namespace

SessionOpReader::SessionOpReader(struct event_base* base, const DaemonConfig& config, const Keys& keys, Hooks hooks)
    : config_(config), keys_(keys), hooks_(std::move(hooks)) {
  own_stream_ = keys_.SessionStream(config_.queue, config_.consumer);
  intake_ = keys_.SessionIntake(config_.queue);
  conn_ = std::make_unique<RedisAsync>(
      base, config_.redis, "sessions",
      RedisAsync::Hooks{[this] {
                          own_scan_ = true;
                          scan_from_[0] = scan_from_[1] = "0";
                          groups_ready_ = false;
                          reading_ = false;
                          CreateGroups();
                        },
                        [this] { reading_ = false; }},
      keys_.ClientName(config_.consumer, "sessions"));
}

void SessionOpReader::Connect() { conn_->Connect(); }

void SessionOpReader::Close() { conn_->Close(); }

void SessionOpReader::CreateGroups() {
  auto left = std::make_shared<int>(2);
  for (const std::string& s : {own_stream_, intake_}) {
    conn_->Command({"XGROUP", "CREATE", s, std::string(Keys::kGroup), "0", "MKSTREAM"}, [this, left](redisReply* r) {
      std::string text = ReplyString(r);
      if (r == nullptr || (r->type == REDIS_REPLY_ERROR && text.rfind("BUSYGROUP", 0) != 0)) return;
      if (--*left == 0) {
        groups_ready_ = true;
        Read();
      }
    });
  }
}

void SessionOpReader::Read() {
  if (reading_ || !groups_ready_ || !conn_->connected() || !hooks_.may_read()) return;
  reading_ = true;
  if (own_scan_) {
    // Pages through what this consumer holds, from after the last entry seen: entries still being
    // served here (skipped by the owner) stay pending, so reading from 0 again would find them
    // forever.
    conn_->Command({"XREADGROUP", "GROUP", std::string(Keys::kGroup), config_.consumer, "COUNT",
                    std::to_string(kScanBatch), "STREAMS", own_stream_, intake_, scan_from_[0], scan_from_[1]},
                   [this](redisReply* r) {
                     reading_ = false;
                     if (r == nullptr) return;
                     size_t n = 0;
                     if (r->type == REDIS_REPLY_ARRAY) {
                       for (size_t i = 0; i < r->elements; ++i) {
                         redisReply* s = r->element[i];
                         if (s->type != REDIS_REPLY_ARRAY || s->elements != 2 || s->element[1]->elements == 0) continue;
                         n += s->element[1]->elements;
                         redisReply* last = s->element[1]->element[s->element[1]->elements - 1];
                         if (last->type == REDIS_REPLY_ARRAY && last->elements > 0) {
                           scan_from_[ReplyString(s->element[0]) == intake_ ? 1 : 0] = ReplyString(last->element[0]);
                         }
                       }
                       Deliver(r);
                     }
                     if (n == 0) own_scan_ = false;
                     Read();
                   });
    return;
  }
  std::vector<std::string> args = {"XREADGROUP", "GROUP", std::string(Keys::kGroup), config_.consumer, "COUNT",
                                   std::to_string(kReadBatch), "BLOCK", std::to_string(kBlockMs), "STREAMS", own_stream_};
  bool room = hooks_.has_room();
  if (room) args.push_back(intake_);
  args.push_back(">");
  if (room) args.push_back(">");
  bool sent = conn_->CommandBlocking(args, [this](redisReply* r) {
    reading_ = false;
    if (r == nullptr) return;  // reconnecting: the connect hook reads again
    if (r->type == REDIS_REPLY_ERROR) {
      LogWarn("reading session operations failed", {{"error", ReplyString(r)}});
      if (ReplyString(r).rfind("NOGROUP", 0) == 0) {
        groups_ready_ = false;
        CreateGroups();
      }
      return;
    }
    if (r->type == REDIS_REPLY_ARRAY) Deliver(r);
    Read();
  });
  if (!sent) reading_ = false;
}

void SessionOpReader::Deliver(redisReply* streams) {
  for (size_t i = 0; i < streams->elements; ++i) {
    redisReply* s = streams->element[i];
    if (s->type != REDIS_REPLY_ARRAY || s->elements != 2) continue;
    std::string stream = ReplyString(s->element[0]);
    redisReply* entries = s->element[1];
    for (size_t k = 0; k < entries->elements; ++k) {
      redisReply* en = entries->element[k];
      if (en->type != REDIS_REPLY_ARRAY || en->elements != 2) continue;
      std::string id = ReplyString(en->element[0]);
      Fields fields = ReplyFields(en->element[1]);
      if (stream == intake_) hooks_.on_intake(id, fields);
      else hooks_.on_own(id, fields);
    }
  }
}

}  // namespace sandpool
