#include "scheduler/redis/redis_async.h"

#include <cstring>
#include <iterator>
#include <unordered_map>

#include "common/clock.h"
#include "common/log.h"
#include "common/sha1.h"
#include "scheduler/redis/redis_libevent.h"

namespace sandpool {
namespace {

// The SHA-1 of each script body, computed on its first use (loop thread only).
const std::string& ScriptSha(const char* body) {
  static std::unordered_map<const char*, std::string> shas;
  auto it = shas.find(body);
  if (it == shas.end()) it = shas.emplace(body, Sha1Hex(body)).first;
  return it->second;
}

struct PendingReply {
  std::weak_ptr<RedisAsync*> owner;
  RedisAsync::Callback cb;
  bool timed;  // counted in sent_us_
};

}  // namespace

RedisAsync::RedisAsync(struct event_base* base, RedisUrl url, std::string name, Hooks hooks, std::string client_name)
    : base_(base), url_(std::move(url)), name_(std::move(name)), hooks_(std::move(hooks)),
      client_name_(std::move(client_name)), self_(std::make_shared<RedisAsync*>(this)) {
  retry_timer_ = evtimer_new(base_, &RedisAsync::OnRetryTimer, this);
}

RedisAsync::~RedisAsync() {
  Close();
  event_free(retry_timer_);
}

void RedisAsync::Connect() {
  if (ac_ != nullptr || closing_) return;
  ac_ = url_.unix_path.empty() ? redisAsyncConnect(url_.host.c_str(), url_.port)
                               : redisAsyncConnectUnix(url_.unix_path.c_str());
  if (ac_ == nullptr || ac_->err) {
    Log(warned_ ? LogLevel::kDebug : LogLevel::kWarn, "redis connect failed",
        {{"conn", name_}, {"error", ac_ ? ac_->errstr : "out of memory"}});
    warned_ = true;
    if (ac_) redisAsyncFree(ac_);
    ac_ = nullptr;
    ScheduleReconnect();
    return;
  }
  ac_->data = this;
  AttachRedisToLoop(ac_, base_);
  redisAsyncSetConnectCallback(ac_, &RedisAsync::OnConnect);
  redisAsyncSetDisconnectCallback(ac_, &RedisAsync::OnDisconnect);
}

void RedisAsync::Close() {
  closing_ = true;
  evtimer_del(retry_timer_);
  if (ac_ != nullptr) {
    redisAsyncContext* ac = ac_;
    ac_ = nullptr;
    connected_ = false;
    ac->data = nullptr;
    redisAsyncFree(ac);  // pending callbacks run with nullptr replies
  }
  stall_since_us_ = 0;
  sent_us_.clear();
}

void RedisAsync::ScheduleReconnect() {
  if (closing_) return;
  struct timeval tv = {backoff_ms_ / 1000, (backoff_ms_ % 1000) * 1000};
  evtimer_add(retry_timer_, &tv);
  backoff_ms_ = std::min(backoff_ms_ * 2, 2000);
}

void RedisAsync::OnRetryTimer(evutil_socket_t, short, void* arg) {
  static_cast<RedisAsync*>(arg)->Connect();
}

void RedisAsync::OnConnect(const redisAsyncContext* ac, int status) {
  auto* self = static_cast<RedisAsync*>(ac->data);
  if (self == nullptr) return;
  if (status != REDIS_OK) {
    Log(self->warned_ ? LogLevel::kDebug : LogLevel::kWarn, "redis connect failed",
        {{"conn", self->name_}, {"error", ac->errstr}});
    self->warned_ = true;
    self->ac_ = nullptr;  // hiredis frees the context after this callback
    self->ScheduleReconnect();
    return;
  }
  self->connected_ = true;
  self->backoff_ms_ = 50;
  self->sent_us_.clear();
  if (self->warned_) LogInfo("redis reconnected", {{"conn", self->name_}});
  self->warned_ = false;
  LogDebug("redis connected", {{"conn", self->name_}, {"url", self->url_.Redacted()}});
  if (!self->url_.password.empty()) {
    std::vector<std::string> auth = {"AUTH"};
    if (!self->url_.user.empty()) auth.push_back(self->url_.user);
    auth.push_back(self->url_.password);
    std::string name = self->name_;
    self->Command(auth, [name](redisReply* r) {
      if (r != nullptr && r->type == REDIS_REPLY_ERROR) LogError("redis AUTH failed", {{"conn", name}, {"error", r->str}});
    });
  }
  if (self->url_.db != 0) self->Command({"SELECT", std::to_string(self->url_.db)}, [](redisReply*) {});
  if (!self->client_name_.empty()) self->Command({"CLIENT", "SETNAME", self->client_name_}, [](redisReply*) {});
  for (const char* body : self->preload_) {
    (void)ScriptSha(body);
    self->Command({"SCRIPT", "LOAD", body}, [](redisReply*) {});
  }
  for (auto& [channel, cb] : self->subscriptions_) {
    const std::string_view args[] = {"SUBSCRIBE", channel};
    (void)self->SendRaw(args, &RedisAsync::OnMessage, cb.get());
  }
  if (self->hooks_.on_connect) self->hooks_.on_connect();
}

void RedisAsync::OnDisconnect(const redisAsyncContext* ac, int status) {
  auto* self = static_cast<RedisAsync*>(ac->data);
  if (self == nullptr) return;
  bool was_connected = self->connected_;
  self->ac_ = nullptr;
  self->connected_ = false;
  self->EndStall("redis connection lost after not answering");
  self->sent_us_.clear();
  if (status != REDIS_OK) LogWarn("redis connection lost", {{"conn", self->name_}, {"error", ac->errstr}});
  if (was_connected && self->hooks_.on_disconnect) self->hooks_.on_disconnect();
  self->ScheduleReconnect();
}

template <typename Args>
bool RedisAsync::SendRaw(const Args& args, redisCallbackFn* fn, void* priv) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  argv.reserve(std::size(args));
  lens.reserve(std::size(args));
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  return redisAsyncCommandArgv(ac_, fn, priv, static_cast<int>(std::size(args)), argv.data(), lens.data()) == REDIS_OK;
}

template <typename Args>
bool RedisAsync::Send(const Args& args, Callback cb, bool timed) {
  if (!connected_ || ac_ == nullptr) return false;
  auto p = std::make_unique<PendingReply>(PendingReply{self_, std::move(cb), timed});
  // hiredis refuses commands on a context that is disconnecting; then it keeps no reference to
  // `p` and will never call back: the callback must not be promised.
  if (!SendRaw(args, &RedisAsync::OnReply, p.get())) return false;
  if (timed) sent_us_.push_back(MonotonicUs());
  (void)p.release();  // owned by hiredis until OnReply
  return true;
}

bool RedisAsync::Command(const std::vector<std::string>& args, Callback cb) {
  return Send(args, std::move(cb), true);
}

bool RedisAsync::CommandOf(std::initializer_list<std::string_view> args, Callback cb) {
  return Send(args, std::move(cb), true);
}

bool RedisAsync::CommandBlocking(const std::vector<std::string>& args, Callback cb) {
  return Send(args, std::move(cb), false);
}

bool RedisAsync::Eval(const char* body, std::vector<std::string> args, Callback cb) {
  auto request = std::make_shared<std::vector<std::string>>();
  request->reserve(args.size() + 2);
  request->push_back("EVALSHA");
  request->push_back(ScriptSha(body));
  for (std::string& a : args) request->push_back(std::move(a));
  return Command(*request, [this, body, request, cb = std::move(cb)](redisReply* r) {
    if (r != nullptr && r->type == REDIS_REPLY_ERROR && std::strncmp(r->str, "NOSCRIPT", 8) == 0) {
      (*request)[0] = "EVAL";
      (*request)[1] = body;
      if (!Command(*request, cb)) cb(nullptr);  // as if lost with the connection
      return;
    }
    cb(r);
  });
}

void RedisAsync::WatchStall(int64_t threshold_ms) {
  stall_threshold_ms_ = threshold_ms;
  if (stall_since_us_ != 0 || OldestPendingMs() <= threshold_ms) return;
  stall_since_us_ = sent_us_.front();
  LogWarn("redis not answering", {{"conn", name_}, {"waited_ms", OldestPendingMs()},
                                  {"pending_commands", static_cast<uint64_t>(sent_us_.size())}});
}

void RedisAsync::EndStall(const char* how) {
  if (stall_since_us_ == 0) return;
  int64_t ms = (MonotonicUs() - stall_since_us_) / 1000;
  stall_since_us_ = 0;
  Log(LogLevel::kWarn, how, {{"conn", name_}, {"stalled_ms", ms}});
}

int64_t RedisAsync::OldestPendingMs() const {
  if (sent_us_.empty()) return 0;
  return (MonotonicUs() - sent_us_.front()) / 1000;
}

void RedisAsync::OnReply(redisAsyncContext*, void* reply, void* priv) {
  std::unique_ptr<PendingReply> p(static_cast<PendingReply*>(priv));
  if (p->owner.expired()) return;
  RedisAsync* self = *p->owner.lock();
  double seconds = -1;
  if (p->timed && reply != nullptr && !self->sent_us_.empty()) {
    seconds = static_cast<double>(MonotonicUs() - self->sent_us_.front()) / 1e6;
    self->sent_us_.pop_front();
  }
  if (reply != nullptr && self->hooks_.on_reply) self->hooks_.on_reply(seconds, static_cast<redisReply*>(reply));
  // Replies that waited through the stall arrive together: it is over once what is left is young.
  if (self->stall_since_us_ != 0 && self->OldestPendingMs() <= self->stall_threshold_ms_) {
    self->EndStall("redis answering again");
  }
  if (p->cb) p->cb(static_cast<redisReply*>(reply));
}

void RedisAsync::Subscribe(const std::string& channel, Callback cb) {
  auto& slot = subscriptions_[channel];
  slot = std::make_unique<Callback>(std::move(cb));
  const std::string_view args[] = {"SUBSCRIBE", channel};
  if (connected_ && ac_ != nullptr) (void)SendRaw(args, &RedisAsync::OnMessage, slot.get());
}

void RedisAsync::OnMessage(redisAsyncContext* ac, void* reply, void* priv) {
  if (ac->data == nullptr || reply == nullptr) return;
  auto* r = static_cast<redisReply*>(reply);
  if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[0]->type == REDIS_REPLY_STRING &&
      std::string_view(r->element[0]->str, r->element[0]->len) == "message") {
    (*static_cast<Callback*>(priv))(r);
  }
}

std::string ReplyString(const redisReply* r) {
  if (r == nullptr) return {};
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR) {
    return std::string(r->str, r->len);
  }
  if (r->type == REDIS_REPLY_INTEGER) return std::to_string(r->integer);
  return {};
}

std::map<std::string, std::string> ReplyFields(const redisReply* r) {
  std::map<std::string, std::string> out;
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return out;
  for (size_t i = 0; i + 1 < r->elements; i += 2) out[ReplyString(r->element[i])] = ReplyString(r->element[i + 1]);
  return out;
}

}  // namespace sandpool
