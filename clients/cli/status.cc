// `sandpool status`: read-only views of the queue, the daemons and one job.
#include <unistd.h>

#include "clients/cli/commands.h"
#include "clients/cli/help.h"
#include "clients/cli/output.h"
#include "common/log.h"
#include "queue/keys.h"
#include "queue/redis_sync.h"
#include "queue/redis_url.h"

namespace sandpool::cli {
namespace {

std::string ReplyText(const redisReply* r) {
  switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
      return std::string(r->str, r->len);
    case REDIS_REPLY_INTEGER:
      return std::to_string(r->integer);
    case REDIS_REPLY_NIL:
      return "nil";
    case REDIS_REPLY_ARRAY: {
      std::string s = "[";
      for (size_t i = 0; i < r->elements; ++i) {
        if (i) s += ' ';
        s += ReplyText(r->element[i]);
      }
      return s + "]";
    }
  }
  return "?";
}

void Out(const std::string& s) { (void)WriteFd(STDOUT_FILENO, s); }

// Values that may contain anything (ids, consumer names) are shown JSON-escaped only when they
// would not print cleanly.
std::string Printable(std::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c >= 0x7f) {
      std::string q;
      AppendJsonString(q, s);
      return q;
    }
  }
  return std::string(s);
}

Status QueueStatus(SyncRedis& redis, const Keys& keys, const std::string& queue) {
  std::string stream = keys.Queue(queue);
  auto len = redis.Command({"XLEN", stream});
  if (!len.ok()) return len.status().Prefixed("XLEN");
  Out("queue " + Printable(queue) + " (" + Printable(stream) + "): " +
      std::to_string(len.value()->integer) + " entries queued or running\n");

  auto groups = redis.Command({"XINFO", "GROUPS", stream});
  if (!groups.ok()) {
    // No stream yet is normal before the first job or daemon.
    Out("  no consumer group (" + groups.status().message() + ")\n");
  } else {
    const redisReply* g = groups.value().get();
    if (g->type == REDIS_REPLY_ARRAY && g->elements == 0) Out("  no consumer group\n");
    for (size_t i = 0; g->type == REDIS_REPLY_ARRAY && i < g->elements; ++i) {
      const redisReply* e = g->element[i];
      if (e->type != REDIS_REPLY_ARRAY) continue;
      // RESP2 gives each group as a flat list: name value name value ...
      std::string line = "  group";
      for (size_t k = 0; k + 1 < e->elements; k += 2) {
        line += ' ' + ReplyText(e->element[k]) + '=' + Printable(ReplyText(e->element[k + 1]));
      }
      Out(line + "\n");
    }
  }

  std::string pattern = keys.Daemon("*");
  std::string daemon_prefix = keys.Daemon("");
  std::string cursor = "0";
  int daemons = 0;
  Out("daemons:\n");
  do {
    auto scan = redis.Command({"SCAN", cursor, "MATCH", pattern, "COUNT", "100"});
    if (!scan.ok()) return scan.status().Prefixed("SCAN");
    const redisReply* s = scan.value().get();
    if (s->type != REDIS_REPLY_ARRAY || s->elements != 2) return Status::Error("SCAN: unexpected reply");
    cursor = ReplyText(s->element[0]);
    const redisReply* found = s->element[1];
    for (size_t i = 0; found->type == REDIS_REPLY_ARRAY && i < found->elements; ++i) {
      std::string key = ReplyText(found->element[i]);
      auto v = redis.Command({"GET", key});
      if (!v.ok() || v.value()->type != REDIS_REPLY_STRING) continue;  // expired meanwhile
      std::string name = key.substr(std::min(key.size(), daemon_prefix.size()));
      auto json = MsgpackToJson(std::string_view(v.value()->str, v.value()->len));
      Out("  " + Printable(name) + ": " + (json.ok() ? json.value() : json.status().message()) + "\n");
      ++daemons;
    }
  } while (cursor != "0");
  if (daemons == 0) Out("  none alive\n");
  return Status::Ok();
}

Status JobStatus(SyncRedis& redis, const Keys& keys, const std::string& id) {
  auto hash = redis.Command({"HGETALL", keys.Job(id)});
  if (!hash.ok()) return hash.status().Prefixed("HGETALL");
  Out("job " + id + "\n");
  const redisReply* h = hash.value().get();
  if (h->type != REDIS_REPLY_ARRAY || h->elements == 0) {
    Out("  no state (queued and not claimed yet, unknown, or expired)\n");
  }
  for (size_t i = 0; h->type == REDIS_REPLY_ARRAY && i + 1 < h->elements; i += 2) {
    Out("  " + Printable(ReplyText(h->element[i])) + ": " + Printable(ReplyText(h->element[i + 1])) +
        "\n");
  }
  auto ttl = redis.Command({"TTL", keys.Result(id)});
  if (!ttl.ok()) return ttl.status().Prefixed("TTL");
  long long t = ttl.value()->integer;
  if (t == -2) {
    Out("  result: not stored\n");
  } else if (t == -1) {
    Out("  result: stored\n");
  } else {
    Out("  result: stored (expires in " + std::to_string(t) + " s)\n");
  }
  return Status::Ok();
}

}  // namespace

int StatusCommand(const std::vector<std::string>& args, GlobalOptions g) {
  std::optional<std::string> id;
  for (size_t i = 0; i < args.size(); ++i) {
    auto global = ConsumeGlobalOption(args, &i, &g);
    if (!global.ok()) {
      PrintError(global.status().message());
      return kExitUsage;
    }
    if (global.value()) continue;
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      (void)WriteFd(STDOUT_FILENO, HelpText("status"));
      return 0;
    }
    if (a.starts_with("-") || id) {
      PrintError("unexpected argument '" + a + "'; see 'sandpool status --help'");
      return kExitUsage;
    }
    if (!ValidJobId(a)) {
      PrintError("invalid job id '" + a + "'");
      return kExitUsage;
    }
    id = a;
  }
  auto url = ParseRedisUrl(g.redis_url);
  if (!url.ok()) {
    PrintError(url.status().message());
    return kExitUsage;
  }
  auto conn = SyncRedis::Connect(url.value());
  if (!conn.ok()) {
    PrintError(conn.status().message());
    return kExitFailure;
  }
  Keys keys(g.prefix);
  Status s = id ? JobStatus(*conn.value(), keys, *id) : QueueStatus(*conn.value(), keys, g.queue);
  if (!s.ok()) {
    PrintError(s.message());
    return kExitFailure;
  }
  return 0;
}

}  // namespace sandpool::cli
