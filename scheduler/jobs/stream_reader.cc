#include "scheduler/jobs/stream_reader.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "common/clock.h"
#include "common/log.h"
#include "scheduler/redis/liveness.h"

namespace sandpool {
namespace {

constexpr int kBlockMs = 2000;
constexpr size_t kOwnPendingBatch = 100;
constexpr size_t kOrphanBatch = 100;

}  // namespace

StreamReader::StreamReader(RedisAsync* reader, RedisAsync* cmd, const Keys& keys, const DaemonConfig& config, Hooks hooks)
    : reader_(reader), cmd_(cmd), keys_(keys), config_(config), hooks_(std::move(hooks)) {
  streams_.push_back(Stream{keys_.Queue(config_.queue)});
  for (uint32_t t = 0; t < config_.templates.size(); ++t) {
    Stream s{keys_.Forward(config_.queue, config_.templates[t].name)};
    s.tmpl = static_cast<int>(t);
    streams_.push_back(std::move(s));
  }
}

std::vector<std::string> StreamReader::Streams() const {
  std::vector<std::string> out;
  for (const Stream& s : streams_) out.push_back(s.key);
  return out;
}

size_t StreamReader::Capacity(const Stream& s) const {
  return s.tmpl < 0 ? hooks_.intake_capacity() : hooks_.template_capacity(static_cast<uint32_t>(s.tmpl));
}

void StreamReader::OnReaderConnected() { Read(); }

void StreamReader::OnReaderDisconnected() { streams_[0].in_flight = false; }

void StreamReader::OnCommandConnected() {
  cmd_connected_since_us_ = MonotonicUs();
  for (Stream& s : streams_) {
    s.group_ready = false;
    s.own_scan = true;
    s.in_flight = false;
    s.orphans.clear();
  }
  orphan_search_in_flight_ = false;
  orphans_checked_ = false;
  CreateGroups();
  FindOrphans();
}

void StreamReader::OnCommandDisconnected() {
  cmd_connected_since_us_ = 0;
  for (size_t i = 1; i < streams_.size(); ++i) streams_[i].in_flight = false;
}

void StreamReader::Stop() {
  stopped_ = true;
  if (reader_) reader_->Close();
}

// The groups start at 0 so entries queued before any daemon ever ran are not skipped. A failure
// other than "exists" (e.g. -LOADING while Redis replays its AOF) is retried every heartbeat.
void StreamReader::CreateGroups() {
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (streams_[i].group_ready) continue;
    cmd_->Command({"XGROUP", "CREATE", streams_[i].key, std::string(Keys::kGroup), "0", "MKSTREAM"},
                  [this, i](redisReply* r) {
                    if (r == nullptr) return;
                    if (r->type == REDIS_REPLY_ERROR && ReplyString(r).rfind("BUSYGROUP", 0) != 0) {
                      LogWarn("cannot create the consumer group yet", {{"stream", streams_[i].key}, {"error", ReplyString(r)}});
                      return;
                    }
                    streams_[i].group_ready = true;
                    Read();
                  });
  }
}

void StreamReader::OnForwarded(std::string_view tmpl) {
  bool known = false;
  for (Stream& s : streams_) {
    if (s.tmpl >= 0 && config_.templates[static_cast<size_t>(s.tmpl)].name == tmpl) known = true;
  }
  for (Stream& s : streams_) {
    if (s.tmpl >= 0 && (!known || config_.templates[static_cast<size_t>(s.tmpl)].name == tmpl)) ++s.wakes;
  }
  Read();
}

void StreamReader::Heartbeat() {
  if (stopped_ || !cmd_->connected()) return;
  for (Stream& s : streams_) ++s.wakes;
  CreateGroups();
  FindOrphans();
  Read();
}

void StreamReader::Read() {
  if (stopped_ || !cmd_->connected()) return;
  for (size_t i = 0; i < streams_.size(); ++i) {
    Stream& s = streams_[i];
    if (!s.group_ready || s.in_flight) continue;
    if (s.own_scan) {
      ScanOwn(i);
      continue;
    }
    if (!s.orphans.empty()) {
      if (Capacity(s) > 0) ClaimOrphans(i);
      continue;  // orphans first: nothing new is read from this stream while they wait
    }
    if (i > 0) ReadForward(i);
  }
  // New work waits until this connection's first look for orphans is done (they go first).
  if (streams_[0].group_ready && !streams_[0].own_scan && streams_[0].orphans.empty() && orphans_checked_) ReadIntake();
}

void StreamReader::Deliver(redisReply* entries, const std::string& stream) {
  if (entries == nullptr || entries->type != REDIS_REPLY_ARRAY) return;
  std::vector<StreamEntry> out;
  for (size_t i = 0; i < entries->elements; ++i) {
    redisReply* item = entries->element[i];
    if (item->type != REDIS_REPLY_ARRAY || item->elements < 1) continue;
    StreamEntry e;
    e.stream = stream;
    e.id = ReplyString(item->element[0]);
    if (hooks_.holds(e.id)) continue;  // already ours and being handled
    redisReply* fields = item->elements > 1 ? item->element[1] : nullptr;
    if (fields == nullptr || fields->type != REDIS_REPLY_ARRAY) {
      e.deleted = true;
    } else {
      for (size_t j = 0; j + 1 < fields->elements; j += 2) {
        e.fields[ReplyString(fields->element[j])] = ReplyString(fields->element[j + 1]);
      }
    }
    out.push_back(std::move(e));
  }
  if (!out.empty()) hooks_.on_entries(std::move(out));
}

// Entries delivered to this consumer name before and never acknowledged: a previous run of this
// daemon died with them, or Redis dropped a reply. The claim script tells which ran.
void StreamReader::ScanOwn(size_t i) {
  streams_[i].in_flight = true;
  std::string key = streams_[i].key;
  bool sent = cmd_->Command({"XREADGROUP", "GROUP", std::string(Keys::kGroup), config_.consumer, "COUNT",
                             std::to_string(kOwnPendingBatch), "STREAMS", key, "0"},
                            [this, i, key](redisReply* r) {
                              streams_[i].in_flight = false;
                              if (r == nullptr || stopped_) return;
                              if (r->type == REDIS_REPLY_ERROR) {
                                LogWarn("reading own pending entries failed; retrying at the next heartbeat",
                                        {{"stream", key}, {"error", ReplyString(r)}});
                                if (ReplyString(r).rfind("NOGROUP", 0) == 0) streams_[i].group_ready = false;
                                return;
                              }
                              streams_[i].own_scan = false;
                              if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->elements == 2) {
                                redisReply* entries = r->element[0]->element[1];
                                size_t fresh = 0;
                                for (size_t k = 0; k < entries->elements; ++k) {
                                  fresh += !hooks_.holds(ReplyString(entries->element[k]->element[0]));
                                }
                                if (fresh > 0) LogInfo("recovering own pending entries", {{"stream", key}, {"count", static_cast<uint64_t>(fresh)}});
                                Deliver(entries, key);
                                // A full batch may mean more; entries we hold are skipped, so this ends.
                                if (fresh == kOwnPendingBatch) streams_[i].own_scan = true;
                              }
                              Read();
                            });
  if (!sent) streams_[i].in_flight = false;
}

void StreamReader::ReadForward(size_t i) {
  if (streams_[i].wakes == streams_[i].wakes_read) return;  // empty since the last reason to look
  size_t n = Capacity(streams_[i]);
  if (n == 0) return;
  streams_[i].in_flight = true;
  std::string key = streams_[i].key;
  uint64_t wakes = streams_[i].wakes;
  bool sent = cmd_->Command({"XREADGROUP", "GROUP", std::string(Keys::kGroup), config_.consumer, "COUNT",
                             std::to_string(n), "STREAMS", key, ">"},
                            [this, i, key, wakes](redisReply* r) {
                              streams_[i].in_flight = false;
                              if (r == nullptr || stopped_) return;
                              if (r->type == REDIS_REPLY_ERROR) {
                                if (ReplyString(r).rfind("NOGROUP", 0) == 0) streams_[i].group_ready = false;
                                return;
                              }
                              if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->elements == 2 &&
                                  r->element[0]->element[1]->elements > 0) {
                                Deliver(r->element[0]->element[1], key);
                                Read();  // there may be more
                              } else {
                                // Empty as of every reason to look that came before this read.
                                streams_[i].wakes_read = wakes;
                              }
                            });
  if (!sent) streams_[i].in_flight = false;
}

void StreamReader::ReadIntake() {
  Stream& s = streams_[0];
  if (s.in_flight || !reader_ || !reader_->connected()) return;
  size_t n = Capacity(s);
  if (n == 0) return;
  s.in_flight = true;
  reader_->CommandBlocking({"XREADGROUP", "GROUP", std::string(Keys::kGroup), config_.consumer, "COUNT",
                            std::to_string(n), "BLOCK", std::to_string(kBlockMs), "STREAMS", s.key, ">"},
                           [this](redisReply* r) {
                             streams_[0].in_flight = false;
                             // While draining, entries that still arrive stay pending and
                             // unclaimed: another daemon, or our own restart, runs them.
                             if (r == nullptr || stopped_) return;
                             if (r->type == REDIS_REPLY_ERROR) {
                               LogWarn("XREADGROUP failed", {{"error", ReplyString(r)}});
                               if (ReplyString(r).rfind("NOGROUP", 0) == 0) streams_[0].group_ready = false;
                               return;
                             }
                             if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->elements == 2) {
                               Deliver(r->element[0]->element[1], streams_[0].key);
                             }
                             Read();
                           });
}

void StreamReader::FindOrphans() {
  if (orphan_search_in_flight_ || cmd_connected_since_us_ == 0) return;
  orphan_search_in_flight_ = true;
  bool sent = FindLiveDaemons(cmd_, keys_, config_, [this](std::optional<std::set<std::string>> alive) {
    auto done = [this] {
      orphan_search_in_flight_ = false;
      bool first = !orphans_checked_;
      orphans_checked_ = true;
      if (first) Read();
    };
    if (!alive) {
      done();
      return;
    }
    ListPending(std::make_shared<std::set<std::string>>(std::move(*alive)), done);
  });
  if (!sent) orphan_search_in_flight_ = false;
}

void StreamReader::ListPending(std::shared_ptr<std::set<std::string>> alive, std::function<void()> done) {
  auto left = std::make_shared<size_t>(streams_.size());
  for (size_t i = 0; i < streams_.size(); ++i) {
    std::string key = streams_[i].key;
    bool ok = cmd_->Command({"XPENDING", key, std::string(Keys::kGroup), "IDLE", std::to_string(config_.lease_ms), "-",
                             "+", std::to_string(kOrphanBatch)},
                            [this, i, alive, left, done](redisReply* p) {
                              bool last = --*left == 0;
                              if (p != nullptr && p->type == REDIS_REPLY_ARRAY) TakeOrphanList(i, p, *alive);
                              if (last) done();
                            });
    if (!ok && --*left == 0) done();
  }
}

void StreamReader::TakeOrphanList(size_t i, redisReply* p, const std::set<std::string>& alive) {
  std::vector<std::string> found;
  for (size_t k = 0; k < p->elements; ++k) {
    redisReply* e = p->element[k];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 2) continue;
    if (alive.count(ReplyString(e->element[1])) == 0) found.push_back(ReplyString(e->element[0]));
  }
  if (!found.empty() && streams_[i].orphans.empty()) {
    LogInfo("found entries of a daemon that is gone", {{"stream", streams_[i].key}, {"count", static_cast<uint64_t>(found.size())}});
  }
  streams_[i].orphans = std::move(found);
  Read();
}

void StreamReader::ClaimOrphans(size_t i) {
  Stream& s = streams_[i];
  size_t n = std::min(Capacity(s), s.orphans.size());
  std::vector<std::string> args = {"XCLAIM", s.key, std::string(Keys::kGroup), config_.consumer,
                                   std::to_string(config_.lease_ms)};
  args.insert(args.end(), s.orphans.begin(), s.orphans.begin() + static_cast<long>(n));
  s.orphans.erase(s.orphans.begin(), s.orphans.begin() + static_cast<long>(n));
  s.in_flight = true;
  std::string key = s.key;
  bool sent = cmd_->Command(args, [this, i, key](redisReply* r) {
    streams_[i].in_flight = false;
    if (r == nullptr || stopped_ || r->type != REDIS_REPLY_ARRAY) return;
    if (r->elements > 0) LogInfo("reclaimed entries of a daemon that is gone", {{"stream", key}, {"count", static_cast<uint64_t>(r->elements)}});
    Deliver(r, key);
    Read();
  });
  if (!sent) s.in_flight = false;
}

}  // namespace sandpool
