// CLAIM and FINISH over a batch of entries, against a real redis-server: a batch gives each entry
// the verdict, and leaves Redis in the state, that one call per entry in the same order gives
// (the daemon sends what one loop turn gathered as one call: JobLedger). And FINISH publishes on
// exactly the channels someone listens to.
#include <gtest/gtest.h>

#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "scheduler/redis/scripts.h"
#include "tests/support/redis_server.h"

namespace sandpool {
namespace {

constexpr const char* kConsumer = "d1";
constexpr const char* kNow = "1700000000000";
constexpr const char* kTtl = "600";
constexpr const char* kGroup = "workers";

std::string Str(const redisReply* r) { return r->str ? std::string(r->str, r->len) : std::to_string(r->integer); }

std::vector<std::string> Strings(const redisReply* r) {
  std::vector<std::string> out;
  for (size_t i = 0; i < r->elements; ++i) out.push_back(Str(r->element[i]));
  return out;
}

// One entry of a CLAIM batch.
struct ClaimArgs {
  std::string id, entry, max_attempts = "3", retry_own = "0", notify;
};

class BatchScripts : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!server_.Start()) GTEST_SKIP() << "redis-server not available";
    redis_ = MustConnect(server_.UnixUrl());
    ASSERT_NE(redis_, nullptr);
  }

  ReplyPtr Must(const std::vector<std::string>& args) {
    auto r = redis_->Command(args);
    EXPECT_TRUE(r.ok()) << r.status().message() << " (" << args[0] << ")";
    return r.ok() ? std::move(*r) : nullptr;
  }

  // The state every scenario starts from, under `p` (a key prefix): one job per kind of verdict.
  void Seed(const std::string& p) {
    // "owned": its hash names another entry (a duplicate submission of a job queued or running).
    Must({"HSET", p + ":job:owned", "entry", "1-1", "state", "running", "consumer", "d2", "attempt", "1"});
    // "cancelled": a client set the flag before any daemon read it.
    Must({"HSET", p + ":job:cancelled", "cancel", "1", "cancel_ms", "5"});
    // "finished": a result is stored (a resubmission of a finished job).
    Must({"SET", p + ":result:finished", "stored-result"});
    // "lost": running under a daemon that died, no attempts left.
    Must({"HSET", p + ":job:lost", "entry", "9-4", "state", "running", "consumer", "d2", "attempt", "3"});
    // "mine": our own claim whose reply was lost.
    Must({"HSET", p + ":job:mine", "entry", "9-5", "state", "running", "consumer", kConsumer, "attempt", "2"});
    // "expired": a run whose result expired; the id is free again.
    Must({"HSET", p + ":job:expired", "entry", "0-7", "state", "done", "consumer", "d2", "attempt", "1", "done_ms", "10"});
    // "broken": its hash key holds a string (something else wrote it): an error of its own.
    Must({"SET", p + ":job:broken", "x"});
  }

  std::vector<ClaimArgs> Entries() {
    return {{"fresh", "9-1"},
            {"owned", "9-2", "3", "0", "nb"},
            {"cancelled", "9-3"},
            {"finished", "9-4", "3", "0", "nb"},
            {"lost", "9-4"},
            {"mine", "9-5", "3", "1"},
            {"broken", "9-6"},
            {"fresh", "9-7", "3", "0", "nb"},  // the same id again in one batch: a duplicate
            {"expired", "9-8"}};
  }

  ReplyPtr Claim(const std::string& p, const std::vector<ClaimArgs>& batch) {
    std::vector<std::string> args = {"EVAL", kClaimScript, std::to_string(2 * batch.size())};
    for (const ClaimArgs& c : batch) {
      args.push_back(p + ":job:" + c.id);
      args.push_back(p + ":result:" + c.id);
    }
    args.insert(args.end(), {kConsumer, kNow, kTtl, p});
    for (const ClaimArgs& c : batch) args.insert(args.end(), {c.entry, c.max_attempts, c.retry_own, c.notify, c.id});
    return Must(args);
  }

  // Every key under `p`, with the prefix cut off, and what it holds (hashes field by field).
  std::map<std::string, std::string> Dump(const std::string& p) {
    std::map<std::string, std::string> out;
    auto keys = Must({"KEYS", p + ":*"});
    for (const std::string& key : Strings(keys.get())) {
      std::string name = key.substr(p.size());
      std::string type = Str(Must({"TYPE", key}).get());
      if (type == "hash") {
        auto all = Must({"HGETALL", key});
        std::map<std::string, std::string> fields;
        for (size_t i = 0; i + 1 < all->elements; i += 2) fields[Str(all->element[i])] = Str(all->element[i + 1]);
        for (const auto& [f, v] : fields) out[name + "." + f] = v;
      } else if (type == "string") {
        out[name] = Str(Must({"GET", key}).get());
      } else if (type == "stream") {
        auto entries = Must({"XRANGE", key, "-", "+"});
        for (size_t i = 0; i < entries->elements; ++i) {
          out[name + "#" + std::to_string(i)] = [&] {
            std::string s;
            for (const std::string& x : Strings(entries->element[i]->element[1])) s += x + " ";
            return s;
          }();
        }
      }
      auto ttl = Must({"TTL", key});
      out[name + ".ttl>0"] = ttl->integer > 0 ? "yes" : "no";
    }
    return out;
  }

  TestRedisServer server_;
  std::unique_ptr<SyncRedis> redis_;
};

TEST_F(BatchScripts, ClaimBatchGivesTheVerdictsAndStateOfOneCallPerEntry) {
  Seed("one");
  Seed("many");
  std::vector<std::string> singles;
  for (const ClaimArgs& c : Entries()) {
    auto r = Claim("one", {c});
    ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
    for (const std::string& s : Strings(r.get())) singles.push_back(s);
  }
  auto batch = Claim("many", Entries());
  ASSERT_TRUE(batch && batch->type == REDIS_REPLY_ARRAY);
  EXPECT_EQ(Strings(batch.get()), singles);
  // What each kind gets (the error names Redis's reason).
  ASSERT_EQ(singles.size(), 18u);
  EXPECT_EQ(singles[0], "run");
  EXPECT_EQ(singles[1], "1");
  EXPECT_EQ(singles[2], "dup");
  EXPECT_EQ(singles[4], "cancelled");
  EXPECT_EQ(singles[5], "0");
  EXPECT_EQ(singles[6], "done");
  EXPECT_EQ(singles[8], "lost");
  EXPECT_EQ(singles[9], "3");
  EXPECT_EQ(singles[10], "run");
  EXPECT_EQ(singles[11], "2") << "a retried own claim keeps its attempt";
  EXPECT_EQ(singles[12], "error");
  EXPECT_NE(singles[13].find("WRONGTYPE"), std::string::npos) << singles[13];
  EXPECT_EQ(singles[14], "dup");
  EXPECT_EQ(singles[16], "run");
  EXPECT_EQ(singles[17], "1");
  auto one = Dump("one"), many = Dump("many");
  EXPECT_EQ(one, many);
  // The resubmitted finished job's stream heard of it, the duplicates' targets are on the owners'
  // hashes, and every stream a record went to has a TTL.
  EXPECT_EQ(many[":notify:nb#0"], "id finished outcome error exit_code  ");
  EXPECT_EQ(many[":notify:nb.ttl>0"], "yes");
  EXPECT_EQ(many[":job:owned.notify"], "nb");
  EXPECT_EQ(many[":job:fresh.notify"], "nb");
  EXPECT_EQ(many[":job:fresh.entry"], "9-1");
}

class FinishBatch : public BatchScripts {
 protected:
  struct FinishArgs {
    std::string id, entry, stream, attempt = "1";
    std::vector<std::string> live;
    std::string staged = {};  // non-empty: the result, SET at a stage key before the call
  };

  // Queues an entry for `id` on `stream`, reads it as kConsumer and claims it: returns its entry id.
  std::string QueueAndClaim(const std::string& p, const std::string& stream, const std::string& id) {
    (void)redis_->Command({"XGROUP", "CREATE", p + stream, kGroup, "0", "MKSTREAM"});  // BUSYGROUP after the first
    // Entry ids of our own, so that two scenarios compare equal.
    std::string entry = Str(Must({"XADD", p + stream, "10-" + std::to_string(++seq_), "id", id, "notify", "nb"}).get());
    Must({"XREADGROUP", "GROUP", kGroup, kConsumer, "COUNT", "100", "STREAMS", p + stream, ">"});
    auto r = Claim(p, {{id, entry, "3", "0", "nb"}});
    EXPECT_EQ(Str(r->element[0]), "run");
    return entry;
  }

  // `read`: streams (under `p`) the call reads after the results, `count` entries of each.
  ReplyPtr Finish(const std::string& p, const std::vector<FinishArgs>& batch, const std::vector<std::string>& read = {},
                  const std::string& count = "0") {
    std::vector<std::string> args = {"EVAL", kFinishScript, std::to_string(4 * batch.size() + read.size())};
    for (const FinishArgs& f : batch) {
      args.insert(args.end(), {p + ":job:" + f.id, p + ":result:" + f.id, p + f.stream, p + ":out:" + f.id});
    }
    for (const std::string& stream : read) args.push_back(p + stream);
    args.insert(args.end(), {kConsumer, kTtl, kGroup, p, count, std::to_string(read.size())});
    for (const FinishArgs& f : batch) {
      if (!f.staged.empty()) {
        std::string stage = p + ":stage:" + f.id + ":" + kConsumer + ":" + f.attempt;
        Must({"SET", stage, f.staged, "PX", "60000"});
        args.insert(args.end(), {f.entry, f.attempt, "", "", f.id, "exit", "0", "", stage, "0"});
        continue;
      }
      args.insert(args.end(), {f.entry, f.attempt, "result-of-" + f.id, "exited-" + f.id, f.id, "exit", "0", "", "",
                               std::to_string(f.live.size())});
      args.insert(args.end(), f.live.begin(), f.live.end());
    }
    return Must(args);
  }

  // A scenario under `p`: jobs on two streams; one taken over by another daemon (fenced), one
  // whose id another entry owns (dup), one whose hash is broken (error), the others fine.
  std::vector<FinishArgs> Scenario(const std::string& p) {
    seq_ = 0;
    std::vector<FinishArgs> batch;
    batch.push_back({"a", QueueAndClaim(p, ":q", "a"), ":q", "1", {"started-a", "stdout-a"}});
    batch.push_back({"b", QueueAndClaim(p, ":fwd", "b"), ":fwd"});
    std::string c = QueueAndClaim(p, ":q", "c");
    Must({"HSET", p + ":job:c", "consumer", "d2", "attempt", "2"});  // a peer took it over
    batch.push_back({"c", c, ":q"});
    std::string d = QueueAndClaim(p, ":q", "d");
    Must({"HSET", p + ":job:d", "entry", "1-1"});  // the id belongs to another entry
    batch.push_back({"d", d, ":q"});
    std::string e = QueueAndClaim(p, ":q", "e");
    Must({"DEL", p + ":job:e"});
    Must({"SET", p + ":job:e", "x"});
    batch.push_back({"e", e, ":q"});
    batch.push_back({"f", QueueAndClaim(p, ":q", "f"), ":q"});
    return batch;
  }

  int seq_ = 0;
};

TEST_F(FinishBatch, FinishBatchGivesTheVerdictsAndStateOfOneCallPerEntry) {
  auto one_batch = Scenario("one");
  auto many_batch = Scenario("many");
  std::vector<std::string> singles;
  for (const FinishArgs& f : one_batch) {
    auto r = Finish("one", {f});
    ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1);
    singles.push_back(Str(r->element[0]));
  }
  auto batch = Finish("many", many_batch);
  ASSERT_TRUE(batch && batch->type == REDIS_REPLY_ARRAY);
  EXPECT_EQ(Strings(batch.get()), singles);
  ASSERT_EQ(singles.size(), 6u);
  EXPECT_EQ(singles[0], "ok");
  EXPECT_EQ(singles[1], "ok");
  EXPECT_EQ(singles[2], "fenced");
  EXPECT_EQ(singles[3], "dup");
  EXPECT_NE(singles[4].find("WRONGTYPE"), std::string::npos) << singles[4];
  EXPECT_EQ(singles[5], "ok");

  for (const std::string& p : {std::string("one"), std::string("many")}) {
    SCOPED_TRACE(p);
    // Only the "ok" entries are acked and deleted; the others stay pending for the caller.
    EXPECT_EQ(Must({"XLEN", p + ":q"})->integer, 3);  // c, d, e
    EXPECT_EQ(Must({"XLEN", p + ":fwd"})->integer, 0);
    auto pending = Must({"XPENDING", p + ":q", kGroup});
    EXPECT_EQ(pending->element[0]->integer, 3);
    EXPECT_EQ(Str(Must({"GET", p + ":result:a"}).get()), "result-of-a");
    EXPECT_EQ(Must({"EXISTS", p + ":result:c"})->integer, 0) << "a fenced result is not written";
    EXPECT_EQ(Must({"EXISTS", p + ":result:d"})->integer, 0);
    EXPECT_GT(Must({"TTL", p + ":result:f"})->integer, 0);
    EXPECT_EQ(Str(Must({"HGET", p + ":job:f", "state"}).get()), "done");
    EXPECT_EQ(Must({"XLEN", p + ":notify:nb"})->integer, 3);  // a, b, f
    EXPECT_GT(Must({"TTL", p + ":notify:nb"})->integer, 0);
  }
  auto one = Dump("one"), many = Dump("many");
  // done_ms is Redis's clock at each call: equal up to the time between the calls.
  for (auto* d : {&one, &many}) {
    for (auto it = d->begin(); it != d->end();) it = it->first.ends_with(".done_ms") ? d->erase(it) : std::next(it);
    // The completion records' stream ids are times too; their fields are compared.
  }
  EXPECT_EQ(one, many);
}

// Events go to the channels someone listens to, all of them when a pattern subscriber exists, and
// none otherwise (a client that subscribed before submitting still gets every event).
TEST_F(FinishBatch, PublishesOnlyWhereSomeoneListens) {
  auto listener = MustConnect(server_.UnixUrl());
  ASSERT_NE(listener, nullptr);
  ASSERT_TRUE(listener->Append({"SUBSCRIBE", "s:out:a"}).ok());
  auto sub = listener->ReadReply(5000);
  ASSERT_TRUE(sub.ok()) << sub.status().message();
  auto batch = Scenario("s");
  Must({"CONFIG", "RESETSTAT"});
  auto r = Finish("s", batch);
  ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY);
  // The subscriber of a gets a's held live events, then its exited event, in order.
  for (const char* want : {"started-a", "stdout-a", "exited-a"}) {
    auto m = listener->ReadReply(5000);
    ASSERT_TRUE(m.ok()) << m.status().message();
    ASSERT_EQ((*m)->elements, 3u);
    EXPECT_EQ(Str((*m)->element[1]), "s:out:a");
    EXPECT_EQ(Str((*m)->element[2]), want);
  }
  // Nobody listened to b..f: PUBLISH ran for a's three events only.
  auto stats = Must({"INFO", "commandstats"});
  std::string text = Str(stats.get());
  EXPECT_NE(text.find("cmdstat_publish:calls=3,"), std::string::npos) << text;

  // A pattern subscriber: every channel is published (PSUBSCRIBE may cover any of them).
  auto patterned = MustConnect(server_.UnixUrl());
  ASSERT_NE(patterned, nullptr);
  ASSERT_TRUE(patterned->Append({"PSUBSCRIBE", "p:out:*"}).ok());
  ASSERT_TRUE(patterned->ReadReply(5000).ok());
  auto more = Scenario("p");
  Must({"CONFIG", "RESETSTAT"});
  r = Finish("p", more);
  ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY);
  // a: its live events and exited; b and f: exited; c (fenced), d (dup), e (error): none.
  std::vector<std::string> heard;
  for (int i = 0; i < 5; ++i) {
    auto m = patterned->ReadReply(5000);
    ASSERT_TRUE(m.ok()) << m.status().message();
    ASSERT_EQ((*m)->elements, 4u);
    heard.push_back(Str((*m)->element[3]));
  }
  EXPECT_EQ(heard, (std::vector<std::string>{"started-a", "stdout-a", "exited-a", "exited-b", "exited-f"}));
  text = Str(Must({"INFO", "commandstats"}).get());
  EXPECT_NE(text.find("cmdstat_publish:calls=5,"), std::string::npos) << text;
}


// A staged result (a large one, SET apart by the daemon) is moved into place for an "ok" verdict
// and only then; its stage key goes either way; the script publishes no exited event for it (the
// daemon does once it hears "ok"), and a completion record names its size instead of carrying it.
TEST_F(FinishBatch, StagedResultsAreMovedIntoPlaceOnlyWhenStored) {
  const std::string p = "st";
  std::string big(70000, 'r');
  std::vector<FinishArgs> batch;
  batch.push_back({"g", QueueAndClaim(p, ":q", "g"), ":q", "1", {}, big});
  Must({"HSET", p + ":job:g", "notify", "nb!"});  // this one's stream wants results carried
  std::string h = QueueAndClaim(p, ":q", "h");
  Must({"HSET", p + ":job:h", "consumer", "d2", "attempt", "2"});  // a peer took it over
  batch.push_back({"h", h, ":q", "1", {}, big});
  std::string i = QueueAndClaim(p, ":q", "i");
  Must({"HSET", p + ":job:i", "entry", "1-1"});  // the id belongs to another entry
  batch.push_back({"i", i, ":q", "1", {}, big});
  batch.push_back({"j", QueueAndClaim(p, ":q", "j"), ":q"});  // not staged, in the same call
  auto listener = MustConnect(server_.UnixUrl());
  ASSERT_NE(listener, nullptr);
  ASSERT_TRUE(listener->Append({"PSUBSCRIBE", p + ":out:*"}).ok());
  ASSERT_TRUE(listener->ReadReply(5000).ok());
  auto r = Finish(p, batch);
  ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY);
  EXPECT_EQ(Strings(r.get()), (std::vector<std::string>{"ok", "fenced", "dup", "ok"}));
  EXPECT_EQ(Str(Must({"GET", p + ":result:g"}).get()), big);
  EXPECT_GT(Must({"TTL", p + ":result:g"})->integer, 0);
  EXPECT_EQ(Must({"EXISTS", p + ":result:h"})->integer, 0) << "a fenced result is not written";
  EXPECT_EQ(Must({"EXISTS", p + ":result:i"})->integer, 0);
  EXPECT_EQ(Strings(Must({"KEYS", p + ":stage:*"}).get()), std::vector<std::string>{});
  EXPECT_EQ(Str(Must({"GET", p + ":result:j"}).get()), "result-of-j");
  // The only event the script published is j's.
  auto m = listener->ReadReply(5000);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(Str((*m)->element[3]), "exited-j");
  // g's record (its stream wants results) gives the size; j's carries its result.
  auto records = Must({"XRANGE", p + ":notify:nb", "-", "+"});
  std::map<std::string, std::map<std::string, std::string>> by_id;
  for (size_t k = 0; k < records->elements; ++k) {
    auto fields = Strings(records->element[k]->element[1]);
    std::map<std::string, std::string> f;
    for (size_t x = 0; x + 1 < fields.size(); x += 2) f[fields[x]] = fields[x + 1];
    by_id[f["id"]] = f;
  }
  ASSERT_EQ(by_id.count("g"), 1u);
  EXPECT_EQ(by_id["g"]["result_bytes"], "70000");
  EXPECT_EQ(by_id["g"].count("result"), 0u);
  EXPECT_EQ(by_id["g"]["outcome"], "exit");
  EXPECT_EQ(by_id.count("j"), 1u);
}

// A finished entry leaves the queue's stream in every shape of batch: a batch of 4 or more trims
// the stream up to its oldest pending entry (or past the last one delivered) and deletes the rest
// of its entries; a smaller batch deletes its own. Entries still running and entries not yet
// delivered stay, so the stream holds only queued and running jobs.
TEST_F(FinishBatch, FinishedEntriesLeaveTheStreamAndNothingElseDoes) {
  auto ids = [&](const std::string& key) {
    std::vector<std::string> out;
    auto r = Must({"XRANGE", key, "-", "+"});
    for (size_t i = 0; i < r->elements; ++i) out.push_back(Str(r->element[i]->element[0]));
    return out;
  };
  // Entries <ms>-1 .. <ms>-n on `stream`; the first `delivered` are read and claimed.
  auto queue = [&](const std::string& stream, int ms, int n, int delivered) {
    Must({"XGROUP", "CREATE", stream, kGroup, "0", "MKSTREAM"});
    for (int i = 1; i <= n; ++i) {
      std::string id = "j" + std::to_string(ms) + "-" + std::to_string(i);
      Must({"XADD", stream, std::to_string(ms) + "-" + std::to_string(i), "id", id});
    }
    Must({"XREADGROUP", "GROUP", kGroup, kConsumer, "COUNT", std::to_string(delivered), "STREAMS", stream, ">"});
    for (int i = 1; i <= delivered; ++i) {
      std::string id = "j" + std::to_string(ms) + "-" + std::to_string(i);
      auto r = Claim("t", {{id, std::to_string(ms) + "-" + std::to_string(i)}});
      EXPECT_EQ(Str(r->element[0]), "run");
    }
  };
  auto finish = [&](const std::string& stream, int ms, const std::vector<int>& which) {
    std::vector<FinishArgs> batch;
    for (int i : which) {
      batch.push_back({"j" + std::to_string(ms) + "-" + std::to_string(i), std::to_string(ms) + "-" + std::to_string(i),
                       stream});
    }
    auto r = Finish("t", batch);
    ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY);
    for (const std::string& v : Strings(r.get())) EXPECT_EQ(v, "ok");
  };

  // 10-2 and 10-7 keep running, 10-8 is still queued; five others finish in one batch.
  queue("t:q", 10, 8, 7);
  finish(":q", 10, {1, 3, 4, 5, 6});
  EXPECT_EQ(ids("t:q"), (std::vector<std::string>{"10-2", "10-7", "10-8"}));
  EXPECT_EQ(Must({"XPENDING", "t:q", kGroup})->element[0]->integer, 2);
  // A batch of two: its entries are deleted; the queued one stays.
  finish(":q", 10, {7, 2});
  EXPECT_EQ(ids("t:q"), (std::vector<std::string>{"10-8"}));

  // Nothing left pending: the trim stops right after the last entry delivered.
  queue("t:q2", 20, 6, 5);
  finish(":q2", 20, {5, 4, 3, 2, 1});
  EXPECT_EQ(ids("t:q2"), (std::vector<std::string>{"20-6"}));
  EXPECT_EQ(Must({"XPENDING", "t:q2", kGroup})->element[0]->integer, 0);
  for (int i = 1; i <= 5; ++i) EXPECT_EQ(Str(Must({"GET", "t:result:j20-" + std::to_string(i)}).get()), "result-of-j20-" + std::to_string(i));
}

}  // namespace
}  // namespace sandpool

namespace sandpool {
namespace {

// A FINISH that carries a read (StreamReader::CarryRead) stores its results exactly as one that
// does not, and then reads the stream as this consumer: the last element is XREADGROUP's reply,
// the entries read are pending here (a lost reply leaves them for the own scan), and a stream
// with nothing new gives nil. A read that fails (no such group) is an error element, and the
// results are stored all the same.
TEST_F(FinishBatch, ACarriedReadComesAfterTheResultsAsTheLastElement) {
  const std::string p = "cr";
  std::vector<FinishArgs> batch;
  batch.push_back({"a", QueueAndClaim(p, ":q", "a"), ":q"});
  batch.push_back({"b", QueueAndClaim(p, ":q", "b"), ":q"});
  std::string c = Str(Must({"XADD", p + ":q", "20-1", "id", "c"}).get());
  std::string d = Str(Must({"XADD", p + ":q", "20-2", "id", "d"}).get());
  Must({"XADD", p + ":q", "20-3", "id", "e"});
  auto r = Finish(p, batch, {":q"}, "2");
  ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY);
  ASSERT_EQ(r->elements, 3u);
  EXPECT_EQ(Str(r->element[0]), "ok");
  EXPECT_EQ(Str(r->element[1]), "ok");
  const redisReply* read = r->element[2];
  ASSERT_EQ(read->type, REDIS_REPLY_ARRAY);
  ASSERT_EQ(read->elements, 1u);
  EXPECT_EQ(Str(read->element[0]->element[0]), p + ":q");
  const redisReply* entries = read->element[0]->element[1];
  ASSERT_EQ(entries->elements, 2u);
  EXPECT_EQ(Str(entries->element[0]->element[0]), c);
  EXPECT_EQ(Str(entries->element[1]->element[0]), d);
  EXPECT_EQ(Strings(entries->element[1]->element[1]), (std::vector<std::string>{"id", "d"}));
  EXPECT_EQ(Str(Must({"GET", p + ":result:a"}).get()), "result-of-a");
  // The two read are pending for this consumer; the finished ones are not.
  auto pending = Must({"XPENDING", p + ":q", kGroup, "-", "+", "10", kConsumer});
  ASSERT_EQ(pending->elements, 2u);
  EXPECT_EQ(Str(pending->element[0]->element[0]), c);

  // The third, then nothing: nil.
  r = Finish(p, {{"c", c, ":q"}}, {":q"}, "4");
  ASSERT_TRUE(r && r->elements == 2u);
  EXPECT_EQ(Str(r->element[0]), "ok") << "c was never claimed: the hash is written by FINISH itself";
  EXPECT_EQ(r->element[1]->element[0]->element[1]->elements, 1u);
  r = Finish(p, {{"d", d, ":q"}}, {":q"}, "4");
  ASSERT_TRUE(r && r->elements == 2u);
  EXPECT_EQ(r->element[1]->type, REDIS_REPLY_NIL);

  // A stream without the group: the read's error, the result stored.
  Must({"XADD", p + ":nogroup", "1-1", "id", "x"});
  std::string e = Str(Must({"XRANGE", p + ":q", "20-3", "20-3"})->element[0]->element[0]);
  r = Finish(p, {{"e", e, ":q"}}, {":nogroup"}, "1");
  ASSERT_TRUE(r && r->elements == 2u);
  EXPECT_EQ(Str(r->element[0]), "ok");
  EXPECT_EQ(r->element[1]->type, REDIS_REPLY_ERROR);
  EXPECT_NE(Str(r->element[1]).find("NOGROUP"), std::string::npos) << Str(r->element[1]);
  EXPECT_EQ(Str(Must({"GET", p + ":result:e"}).get()), "result-of-e");
}

}  // namespace
}  // namespace sandpool
