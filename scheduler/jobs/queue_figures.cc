#include "scheduler/jobs/queue_figures.h"

#include <cstdlib>
#include <memory>

#include "common/clock.h"
#include "queue/keys.h"

namespace sandpool {
namespace {

struct Totals {
  QueueFigures figures;
  size_t left = 0;        // replies still to come
  bool failed = false;
  std::function<void(const QueueFigures&)> done;
};

void Finish(const std::shared_ptr<Totals>& t, Metrics* metrics) {
  if (--t->left > 0 || t->failed) return;
  QueueFigures& f = t->figures;
  double age = f.oldest_ms == 0 ? 0.0 : static_cast<double>(WallMs() - f.oldest_ms) / 1000.0;
  f.oldest_age_s = age > 0 ? age : 0.0;
  metrics->SetQueue(f.pending, f.lag, f.oldest_age_s);
  if (t->done) t->done(f);
}

// The oldest undelivered entry of `stream`: the first one after the group's last-delivered-id.
void ReadOldest(RedisAsync* cmd, const std::string& stream, const std::string& last_delivered,
                std::shared_ptr<Totals> t, Metrics* metrics) {
  ++t->left;
  bool sent = cmd->Command({"XRANGE", stream, "(" + last_delivered, "+", "COUNT", "1"}, [t, metrics](redisReply* r) {
    if (r == nullptr || r->type != REDIS_REPLY_ARRAY) {
      t->failed = true;
    } else if (r->elements == 1 && r->element[0]->type == REDIS_REPLY_ARRAY && r->element[0]->elements == 2) {
      redisReply* e = r->element[0];
      int64_t ms = StreamIdMs(ReplyString(e->element[0]));
      redisReply* f = e->element[1];
      for (size_t i = 0; f->type == REDIS_REPLY_ARRAY && i + 1 < f->elements; i += 2) {
        if (ReplyString(f->element[i]) == "enqueued_ms") ms = std::strtoll(ReplyString(f->element[i + 1]).c_str(), nullptr, 10);
      }
      if (ms > 0 && (t->figures.oldest_ms == 0 || ms < t->figures.oldest_ms)) t->figures.oldest_ms = ms;
    }
    Finish(t, metrics);
  });
  if (!sent) {
    t->failed = true;
    Finish(t, metrics);
  }
}

}  // namespace

int64_t StreamIdMs(const std::string& id) {
  char* end = nullptr;
  long long ms = std::strtoll(id.c_str(), &end, 10);
  return end != id.c_str() && ms > 0 ? ms : 0;
}

void RefreshQueueFigures(RedisAsync* cmd, const std::vector<std::string>& streams, Metrics* metrics,
                         std::function<void(const QueueFigures&)> done) {
  auto t = std::make_shared<Totals>();
  t->done = std::move(done);
  t->left = streams.size() + 1;  // one for this function: nothing is set before every send
  for (const std::string& key : streams) {
    bool sent = cmd->Command({"XINFO", "GROUPS", key}, [cmd, key, t, metrics](redisReply* r) {
      if (r == nullptr || r->type != REDIS_REPLY_ARRAY) {
        // No stream yet (before the first daemon made its group) is an error reply: nothing waits.
        if (r == nullptr) t->failed = true;
        Finish(t, metrics);
        return;
      }
      for (size_t i = 0; i < r->elements; ++i) {
        redisReply* g = r->element[i];
        bool ours = false;
        double pending = 0, lag = 0;
        std::string last;
        for (size_t j = 0; j + 1 < g->elements; j += 2) {
          std::string k = ReplyString(g->element[j]);
          redisReply* v = g->element[j + 1];
          if (k == "name") ours = ReplyString(v) == Keys::kGroup;
          if (k == "pending" && v->type == REDIS_REPLY_INTEGER) pending = static_cast<double>(v->integer);
          if (k == "lag" && v->type == REDIS_REPLY_INTEGER) lag = static_cast<double>(v->integer);
          if (k == "last-delivered-id") last = ReplyString(v);
        }
        if (!ours) continue;
        t->figures.pending += pending;
        t->figures.lag += lag;
        if (!last.empty()) ReadOldest(cmd, key, last, t, metrics);
      }
      Finish(t, metrics);
    });
    if (!sent) {
      t->failed = true;
      Finish(t, metrics);
    }
  }
  Finish(t, metrics);
}

}  // namespace sandpool
