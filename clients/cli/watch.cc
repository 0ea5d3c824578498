#include "clients/cli/watch.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>

#include "clients/cli/output.h"
#include "common/clock.h"

namespace sandpool::cli {
namespace {

void SleepMs(int ms) {
  struct timespec ts = {ms / 1000, static_cast<long>(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

std::string_view ReplyStr(const redisReply* r) {
  if (r == nullptr || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS)) return {};
  return std::string_view(r->str, r->len);
}

}  // namespace

JobWatcher::JobWatcher(RedisUrl url, Keys keys, std::string id, WatchOptions opts)
    : url_(std::move(url)), keys_(std::move(keys)), id_(std::move(id)), opts_(opts) {
  channel_ = keys_.Out(id_);
}

int JobWatcher::RemainingMs(int cap) const {
  if (opts_.deadline_us < 0) return cap;
  int64_t left = (opts_.deadline_us - MonotonicUs()) / 1000;
  return static_cast<int>(std::clamp<int64_t>(left, 0, cap));
}

Status JobWatcher::EnsureCmd() {
  if (cmd_ && cmd_->raw()->err == 0) return Status::Ok();
  cmd_.reset();
  auto c = SyncRedis::Connect(url_);
  if (!c.ok()) return c.status();
  cmd_ = std::move(c).value();
  return Status::Ok();
}

Status JobWatcher::Subscribe() {
  SP_RETURN_IF_ERROR(EnsureCmd());
  auto s = SyncRedis::Connect(url_);
  if (!s.ok()) return s.status();
  sub_ = std::move(s).value();
  SP_RETURN_IF_ERROR(sub_->Append({"SUBSCRIBE", channel_}));
  auto ack = sub_->ReadReply(5000);
  if (!ack.ok()) return ack.status().Prefixed("SUBSCRIBE");
  const redisReply* r = ack.value().get();
  if (r->type == REDIS_REPLY_ERROR) return Status::Error("SUBSCRIBE: " + std::string(r->str, r->len));
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || ReplyStr(r->element[0]) != "subscribe") {
    return Status::Error("SUBSCRIBE: unexpected reply");
  }
  return Status::Ok();
}

Result<std::optional<JobResult>> JobWatcher::FetchResult() {
  SP_RETURN_IF_ERROR(EnsureCmd());
  auto r = cmd_->Command({"GET", keys_.Result(id_)});
  if (!r.ok()) return r.status();
  if (r.value()->type == REDIS_REPLY_NIL) return std::optional<JobResult>();
  if (r.value()->type != REDIS_REPLY_STRING) return Status::Error("GET result: unexpected reply type");
  auto res = DecodeResult(std::string_view(r.value()->str, r.value()->len));
  if (!res) return Status::Error("the stored result of " + id_ + " cannot be decoded");
  return std::optional<JobResult>(std::move(*res));
}

uint64_t JobWatcher::streamed_stdout(const JobResult& r) const {
  return attempt_ == 0 || attempt_ == r.attempt ? out_bytes_ : 0;
}

uint64_t JobWatcher::streamed_stderr(const JobResult& r) const {
  return attempt_ == 0 || attempt_ == r.attempt ? err_bytes_ : 0;
}

std::optional<JobResult> JobWatcher::OnMessage(const redisReply& reply) {
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 3 ||
      ReplyStr(reply.element[0]) != "message" || ReplyStr(reply.element[1]) != channel_) {
    return std::nullopt;  // subscribe confirmations and the like
  }
  auto ev = DecodeEvent(ReplyStr(reply.element[2]));
  if (!ev) {
    // Something we cannot read on our channel: the stream is no longer complete for us.
    live_ = false;
    return std::nullopt;
  }
  if (ev->type == "started" && ev->seq == 0 && ev->attempt > attempt_) {
    // A retry starts its sequence over; its output replaces the earlier attempt's.
    attempt_ = ev->attempt;
    next_seq_ = 0;
    out_bytes_ = err_bytes_ = 0;
  }
  if (ev->seq != next_seq_) {
    live_ = false;  // a gap: some events were lost, only the result key is complete
    return std::nullopt;
  }
  ++next_seq_;
  if (ev->type == "stdout" || ev->type == "stderr") {
    bool out = ev->type == "stdout";
    if (opts_.stream_output) {
      // Write failures (a closed pipe) must not stop us from reporting the exit status.
      (void)WriteFd(out ? STDOUT_FILENO : STDERR_FILENO, ev->data);
    }
    (out ? out_bytes_ : err_bytes_) += ev->data.size();
  } else if (ev->type == "exited" && ev->result) {
    return std::move(ev->result);
  }
  return std::nullopt;  // unknown event types are ignored (PROTOCOL.md section 9)
}

Result<JobResult> JobWatcher::PollResult() {
  int interval = opts_.poll_min_ms;
  for (;;) {
    auto r = FetchResult();
    if (r.ok() && r.value()) return std::move(*r.value());
    // A failed GET (Redis restarting, say) is retried like a missing result: the result key
    // outlives any hiccup.
    if (!r.ok()) cmd_.reset();
    if (opts_.deadline_us >= 0 && MonotonicUs() >= opts_.deadline_us) {
      return Status::Error("timed out waiting for the result of " + id_, ETIMEDOUT);
    }
    SleepMs(std::max(1, RemainingMs(interval)));
    interval = std::min(interval * 2, opts_.poll_max_ms);
  }
}

Result<JobResult> JobWatcher::Wait() {
  // A job that finished before we subscribed (or a duplicate id) sends nothing more.
  if (auto r = FetchResult(); r.ok() && r.value()) return std::move(*r.value());
  while (live_ && sub_) {
    if (opts_.deadline_us >= 0 && MonotonicUs() >= opts_.deadline_us) {
      return Status::Error("timed out waiting for the result of " + id_, ETIMEDOUT);
    }
    auto reply = sub_->ReadReply(std::max(0, RemainingMs(opts_.idle_check_ms)));
    if (!reply.ok()) {
      if (reply.status().sys_errno() != ETIMEDOUT) break;  // the subscription is gone
      // Silence: the job may be quiet, or its `exited` event was lost. The result key decides.
      auto r = FetchResult();
      if (r.ok() && r.value()) return std::move(*r.value());
      continue;
    }
    if (auto result = OnMessage(*reply.value())) return std::move(*result);
  }
  sub_.reset();
  return PollResult();
}

}  // namespace sandpool::cli
