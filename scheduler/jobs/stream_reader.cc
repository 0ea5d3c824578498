#include "scheduler/jobs/stream_reader.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
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

StreamReader::StreamReader(RedisAsync* reader, RedisAsync* cmd, const Keys& keys, const DaemonConfig& config,
                           std::vector<StreamSpec> streams, Hooks hooks)
    : reader_(reader), cmd_(cmd), keys_(keys), config_(config), hooks_(std::move(hooks)) {
  for (StreamSpec& spec : streams) streams_.push_back(Stream{std::move(spec)});
  orphans_checked_ = !Reclaims();
}

std::vector<StreamReader::StreamSpec> StreamReader::JobStreams(const Keys& keys, const DaemonConfig& config,
                                                               std::function<size_t()> intake_capacity,
                                                               std::function<size_t()> intake_capacity_ahead,
                                                               std::function<size_t(uint32_t)> template_capacity) {
  std::vector<StreamSpec> out;
  out.push_back(StreamSpec{keys.Queue(config.queue), std::move(intake_capacity), true, true, "",
                           std::move(intake_capacity_ahead)});
  for (uint32_t t = 0; t < config.templates.size(); ++t) {
    out.push_back(StreamSpec{keys.Forward(config.queue, config.templates[t].name),
                             [template_capacity, t] { return template_capacity(t); }, false, true,
                             config.templates[t].name});
  }
  return out;
}

std::vector<std::string> StreamReader::Streams() const {
  std::vector<std::string> out;
  for (const Stream& s : streams_) out.push_back(s.spec.key);
  return out;
}

bool StreamReader::Reclaims() const {
  return std::any_of(streams_.begin(), streams_.end(), [](const Stream& s) { return s.spec.reclaim; });
}

void StreamReader::RestartScans() {
  for (Stream& s : streams_) {
    s.own_scan = true;
    s.scan_from = "0";
  }
}

void StreamReader::RescanOwn(const std::function<bool(const std::string&)>& wanted) {
  for (Stream& s : streams_) {
    if (s.own_scan || !wanted(s.spec.key)) continue;
    s.own_scan = true;
    s.scan_from = "0";
  }
}

// A reply the reader connection lost may have delivered entries to this consumer that nobody
// saw: they are pending here, and the own scan finds them.
void StreamReader::OnReaderConnected() {
  RestartScans();
  Read();
}

void StreamReader::OnReaderDisconnected() {
  if (!blocking_in_flight_) return;
  blocking_in_flight_ = false;
  for (Stream& s : streams_) {
    if (s.spec.blocking) s.in_flight = false;
  }
}

void StreamReader::OnCommandConnected() {
  cmd_connected_since_us_ = MonotonicUs();
  for (Stream& s : streams_) {
    s.group_ready = false;
    s.in_flight = s.spec.blocking && blocking_in_flight_ && s.carried == 0;
    s.carried = 0;
    s.orphans.clear();
  }
  RestartScans();
  orphan_search_in_flight_ = false;
  orphans_checked_ = !Reclaims();
  CreateGroups();
  FindOrphans();
}

void StreamReader::OnCommandDisconnected() {
  cmd_connected_since_us_ = 0;
  for (Stream& s : streams_) {
    if (!s.spec.blocking || !blocking_in_flight_ || s.carried != 0) s.in_flight = false;
    s.carried = 0;  // its reply is lost with the connection; the own scan on reconnecting finds what it took
  }
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
    cmd_->Command({"XGROUP", "CREATE", streams_[i].spec.key, std::string(Keys::kGroup), "0", "MKSTREAM"},
                  [this, i](redisReply* r) {
                    if (r == nullptr) return;
                    if (r->type == REDIS_REPLY_ERROR && ReplyString(r).rfind("BUSYGROUP", 0) != 0) {
                      LogWarn("cannot create the consumer group yet",
                              {{"stream", streams_[i].spec.key}, {"error", ReplyString(r)}});
                      return;
                    }
                    streams_[i].group_ready = true;
                    Read();
                  });
  }
}

void StreamReader::Wake(std::string_view name) {
  NoteWake(name);
  Read();
}

void StreamReader::NoteWake(std::string_view name) {
  bool known = false;
  for (const Stream& s : streams_) {
    if (!s.spec.blocking && s.spec.wake_name == name) known = true;
  }
  for (Stream& s : streams_) {
    if (!s.spec.blocking && (!known || s.spec.wake_name == name)) ++s.wakes;
  }
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
  if (hooks_.may_read && !hooks_.may_read()) return;
  std::vector<size_t> woken;
  for (size_t i = 0; i < streams_.size(); ++i) {
    Stream& s = streams_[i];
    if (!s.group_ready || s.in_flight) continue;
    if (s.own_scan) {
      ScanOwn(i);
      continue;
    }
    if (!s.orphans.empty()) {
      if (s.spec.capacity() > 0) ClaimOrphans(i);
      continue;  // orphans first: nothing new is read from this stream while they wait
    }
    // Empty since the last reason to look, or no room: nothing to read.
    if (!s.spec.blocking && s.wakes != s.wakes_read && s.spec.capacity() > 0) woken.push_back(i);
  }
  if (!woken.empty()) ReadWoken(woken);
  // New work waits until this connection's first look for orphans is done (they go first).
  if (orphans_checked_) ReadBlocking();
}

void StreamReader::Deliver(redisReply* entries, const std::string& stream, bool read_ahead) {
  if (entries == nullptr || entries->type != REDIS_REPLY_ARRAY) return;
  std::vector<StreamEntry> out;
  for (size_t i = 0; i < entries->elements; ++i) {
    redisReply* item = entries->element[i];
    if (item->type != REDIS_REPLY_ARRAY || item->elements < 1) continue;
    StreamEntry e;
    e.stream = stream;
    e.id = ReplyString(item->element[0]);
    e.read_ahead = read_ahead;
    if (hooks_.holds(stream, e.id)) continue;  // already ours and being handled
    redisReply* fields = item->elements > 1 ? item->element[1] : nullptr;
    if (fields == nullptr || fields->type != REDIS_REPLY_ARRAY) {
      e.deleted = true;
    } else {
      e.fields = ReplyFields(fields);
    }
    out.push_back(std::move(e));
  }
  if (!out.empty()) hooks_.on_entries(std::move(out));
}

std::set<std::string> StreamReader::DeliverStreams(redisReply* r, bool read_ahead) {
  std::set<std::string> found;
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return found;  // nil: no stream had any
  for (size_t k = 0; k < r->elements; ++k) {
    redisReply* s = r->element[k];
    if (s->type != REDIS_REPLY_ARRAY || s->elements != 2 || s->element[1]->elements == 0) continue;
    std::string key = ReplyString(s->element[0]);
    found.insert(key);
    Deliver(s->element[1], key, read_ahead);
  }
  return found;
}

// A multi-stream read does not say which stream lost its group: each is checked again
// (BUSYGROUP: it had one).
void StreamReader::RecheckGroups(const std::vector<size_t>& which) {
  for (size_t i : which) streams_[i].group_ready = false;
  CreateGroups();
}

// Entries delivered to this consumer name before and never acknowledged: a previous run of this
// daemon died with them, or Redis dropped a reply. The owner's claim tells which ran. Paged from
// the last entry seen: entries the owner holds stay pending, and a scan from 0 again would
// return them forever.
void StreamReader::ScanOwn(size_t i) {
  streams_[i].in_flight = true;
  std::string key = streams_[i].spec.key;
  bool sent = cmd_->Command({"XREADGROUP", "GROUP", std::string(Keys::kGroup), config_.consumer, "COUNT",
                             std::to_string(kOwnPendingBatch), "STREAMS", key, streams_[i].scan_from},
                            [this, i, key](redisReply* r) {
                              streams_[i].in_flight = false;
                              if (r == nullptr || stopped_) return;
                              if (r->type == REDIS_REPLY_ERROR) {
                                LogWarn("reading own pending entries failed; retrying at the next heartbeat",
                                        {{"stream", key}, {"error", ReplyString(r)}});
                                if (ReplyString(r).rfind("NOGROUP", 0) == 0) streams_[i].group_ready = false;
                                return;
                              }
                              redisReply* entries = nullptr;
                              if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->elements == 2) {
                                entries = r->element[0]->element[1];
                              }
                              if (entries == nullptr || entries->type != REDIS_REPLY_ARRAY || entries->elements == 0) {
                                streams_[i].own_scan = false;
                              } else {
                                size_t fresh = 0;
                                for (size_t k = 0; k < entries->elements; ++k) {
                                  fresh += !hooks_.holds(key, ReplyString(entries->element[k]->element[0]));
                                }
                                if (fresh > 0) {
                                  LogInfo("recovering own pending entries",
                                          {{"stream", key}, {"count", static_cast<uint64_t>(fresh)}});
                                }
                                redisReply* last = entries->element[entries->elements - 1];
                                streams_[i].scan_from = ReplyString(last->element[0]);
                                Deliver(entries, key);
                              }
                              Read();
                            });
  if (!sent) streams_[i].in_flight = false;
}

// One XREADGROUP for every woken stream (a heartbeat wakes them all: one call, not one per
// template). COUNT applies to each stream, so it is the smallest capacity among them: a stream
// that had more left is read again at once, since its read found entries.
void StreamReader::ReadWoken(const std::vector<size_t>& which) {
  size_t count = std::numeric_limits<size_t>::max();
  for (size_t i : which) count = std::min(count, streams_[i].spec.capacity());
  std::vector<std::string> args = {"XREADGROUP", "GROUP", std::string(Keys::kGroup), config_.consumer, "COUNT",
                                   std::to_string(count), "STREAMS"};
  std::vector<uint64_t> wakes;
  for (size_t i : which) {
    args.push_back(streams_[i].spec.key);
    wakes.push_back(streams_[i].wakes);
    streams_[i].in_flight = true;
  }
  for (size_t k = 0; k < which.size(); ++k) args.push_back(">");
  bool sent = cmd_->Command(args, [this, which, wakes](redisReply* r) {
    for (size_t i : which) streams_[i].in_flight = false;
    if (r == nullptr || stopped_) return;
    if (r->type == REDIS_REPLY_ERROR) {
      if (ReplyString(r).rfind("NOGROUP", 0) == 0) RecheckGroups(which);
      return;
    }
    std::set<std::string> found = DeliverStreams(r);
    // Empty as of every reason to look that came before this read; empty now only if none came
    // since (a wake sent after this read, e.g. for an entry just moved there, is read again).
    bool again = !found.empty();  // there may be more
    for (size_t k = 0; k < which.size(); ++k) {
      Stream& s = streams_[which[k]];
      if (found.count(s.spec.key) > 0) continue;
      s.wakes_read = wakes[k];
      if (s.wakes != wakes[k]) {
        again = true;
      } else if (hooks_.on_empty) {
        hooks_.on_empty(s.spec.key);
      }
    }
    if (again) Read();
  });
  if (!sent) {
    for (size_t i : which) streams_[i].in_flight = false;
  }
}

std::vector<size_t> StreamReader::BlockingToRead(bool ahead, size_t* count) const {
  std::vector<size_t> read;
  *count = std::numeric_limits<size_t>::max();
  for (size_t i = 0; i < streams_.size(); ++i) {
    const Stream& s = streams_[i];
    if (!s.spec.blocking || !s.group_ready || s.in_flight || s.own_scan || !s.orphans.empty()) continue;
    if (ahead && !s.spec.capacity_ahead) continue;
    size_t n = ahead ? s.spec.capacity_ahead() : s.spec.capacity();
    if (n == 0) continue;
    read.push_back(i);
    *count = std::min(*count, n);
  }
  return read;
}

void StreamReader::ReadBlocking() {
  if (blocking_in_flight_ || !reader_ || !reader_->connected()) return;
  size_t count = 0;
  std::vector<size_t> read = BlockingToRead(false, &count);
  if (read.empty()) return;
  std::vector<std::string> args = {"XREADGROUP", "GROUP", std::string(Keys::kGroup), config_.consumer, "COUNT",
                                   std::to_string(count), "BLOCK", std::to_string(kBlockMs), "STREAMS"};
  for (size_t i : read) args.push_back(streams_[i].spec.key);
  for (size_t k = 0; k < read.size(); ++k) args.push_back(">");
  blocking_in_flight_ = true;
  for (size_t i : read) streams_[i].in_flight = true;
  bool sent = reader_->CommandBlocking(args, [this, read](redisReply* r) {
    blocking_in_flight_ = false;
    for (size_t i : read) streams_[i].in_flight = false;
    // While draining, entries that still arrive stay pending and unclaimed: another daemon, or
    // our own restart, runs them.
    if (r == nullptr || stopped_) return;
    if (r->type == REDIS_REPLY_ERROR) {
      LogWarn("XREADGROUP failed", {{"error", ReplyString(r)}});
      if (ReplyString(r).rfind("NOGROUP", 0) == 0) RecheckGroups(read);
      return;
    }
    DeliverStreams(r);
    Read();
  });
  if (!sent) {
    blocking_in_flight_ = false;
    for (size_t i : read) streams_[i].in_flight = false;
  }
}

// Only what ReadBlocking would read (BlockingToRead: the same conditions, the same COUNT rule),
// but with room counted ahead: the reply comes with the results that free the slots it is read for.
std::optional<StreamReader::CarriedRead> StreamReader::CarryRead() {
  if (stopped_ || !cmd_->connected() || !orphans_checked_) return std::nullopt;
  if (hooks_.may_read && !hooks_.may_read()) return std::nullopt;
  size_t count = 0;
  std::vector<size_t> read = BlockingToRead(true, &count);
  if (read.empty()) return std::nullopt;
  CarriedRead out;
  out.count = count;
  out.seq = ++carry_seq_;
  for (size_t i : read) {
    streams_[i].in_flight = true;
    streams_[i].carried = out.seq;
    out.streams.push_back(streams_[i].spec.key);
  }
  return out;
}

void StreamReader::TakeCarried(const CarriedRead& read, redisReply* reply) {
  std::vector<size_t> which;
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (streams_[i].carried != read.seq) continue;  // settled already (its connection went)
    streams_[i].carried = 0;
    streams_[i].in_flight = false;
    which.push_back(i);
  }
  if (which.empty() || stopped_) return;
  if (reply == nullptr) {
    for (size_t i : which) {
      streams_[i].own_scan = true;
      streams_[i].scan_from = "0";
    }
  } else if (reply->type == REDIS_REPLY_ERROR) {
    LogWarn("reading along with results failed", {{"error", ReplyString(reply)}});
    if (ReplyString(reply).rfind("NOGROUP", 0) == 0) RecheckGroups(which);
  } else {
    DeliverStreams(reply, true);
  }
  Read();
}

void StreamReader::FindOrphans() {
  if (!Reclaims() || orphan_search_in_flight_ || cmd_connected_since_us_ == 0) return;
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
  auto left = std::make_shared<size_t>(0);
  for (const Stream& s : streams_) *left += s.spec.reclaim;
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (!streams_[i].spec.reclaim) continue;
    std::string key = streams_[i].spec.key;
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
    LogInfo("found entries of a daemon that is gone",
            {{"stream", streams_[i].spec.key}, {"count", static_cast<uint64_t>(found.size())}});
  }
  streams_[i].orphans = std::move(found);
  Read();
}

void StreamReader::ClaimOrphans(size_t i) {
  Stream& s = streams_[i];
  size_t n = std::min(s.spec.capacity(), s.orphans.size());
  std::vector<std::string> args = {"XCLAIM", s.spec.key, std::string(Keys::kGroup), config_.consumer,
                                   std::to_string(config_.lease_ms)};
  args.insert(args.end(), s.orphans.begin(), s.orphans.begin() + static_cast<long>(n));
  s.orphans.erase(s.orphans.begin(), s.orphans.begin() + static_cast<long>(n));
  s.in_flight = true;
  std::string key = s.spec.key;
  bool sent = cmd_->Command(args, [this, i, key](redisReply* r) {
    streams_[i].in_flight = false;
    if (r == nullptr || stopped_ || r->type != REDIS_REPLY_ARRAY) return;
    if (r->elements > 0) {
      LogInfo("reclaimed entries of a daemon that is gone", {{"stream", key}, {"count", static_cast<uint64_t>(r->elements)}});
    }
    Deliver(r, key);
    Read();
  });
  if (!sent) s.in_flight = false;
}

}  // namespace sandpool
