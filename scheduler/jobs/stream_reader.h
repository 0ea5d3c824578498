// The stream reader: which entries this daemon takes from Redis, and when. Its queues are the
// intake stream clients write (`<prefix>:q:<queue>`) and one forward queue per template
// (`<prefix>:fwd:<queue>:<template>`, where daemons move entries they read but could not start
// soon), all read through the consumer group `workers`.
//
// Order of precedence, every time capacity frees up:
//  1. this consumer's own pending entries, after every (re)connect (a previous run of this
//     daemon died with them, or a reply was lost);
//  2. orphans: entries pending under a daemon that is gone (no connection of its left in CLIENT
//     LIST) and idle past the lease; looked for on connecting (before anything new is read) and
//     every heartbeat, but not while Redis itself has been up for less than a lease (a restart
//     drops every connection at once: every daemon gets that long to come back), and claimed
//     with XCLAIM's min-idle check (a refreshed lease wins the race);
//  3. each template's forward queue, as many as that template has ready slots here, when it may
//     hold something: a daemon announced a forward (OnForwarded, from pub/sub), the last read
//     of it found entries, or a heartbeat came (pub/sub may lose the announcement); never just
//     because a slot became ready (that was most of Redis's calls per job);
//  4. the intake, as many as this daemon can start at once (a busy host leaves jobs to others).
// A daemon that is alive and connected never loses its entries, whatever the pause: only its
// connections disappearing (it died, or Redis dropped it) lets a peer take them.
//
// Ownership: the Daemon owns it; the connections outlive it. Loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "queue/keys.h"
#include "scheduler/config/config.h"
#include "scheduler/jobs/intake.h"
#include "scheduler/redis/redis_async.h"

namespace sandpool {

class StreamReader {
 public:
  struct Hooks {
    // How many entries of the intake (any template) / of template t this daemon can take now.
    std::function<size_t()> intake_capacity;
    std::function<size_t(uint32_t t)> template_capacity;
    // Entries read; they are this daemon's now (the caller holds them until finished).
    std::function<void(std::vector<StreamEntry>)> on_entries;
    // Whether an entry is already being handled here (own-pending scans skip those).
    std::function<bool(const std::string& entry)> holds;
  };

  StreamReader(RedisAsync* reader, RedisAsync* cmd, const Keys& keys, const DaemonConfig& config, Hooks hooks);

  const std::string& intake() const { return streams_[0].key; }
  const std::string& forward(uint32_t t) const { return streams_[t + 1].key; }
  // Every stream read, intake first.
  std::vector<std::string> Streams() const;

  void OnReaderConnected();
  void OnReaderDisconnected();
  void OnCommandConnected();
  void OnCommandDisconnected();
  // Takes whatever capacity allows now (call when a slot becomes ready).
  void Read();
  // Every heartbeat: retries group creation, looks for orphans, reads forward queues.
  void Heartbeat();
  // A daemon moved an entry to the forward queue of the template named `tmpl` (any, if unknown):
  // it is read as soon as that template has a ready slot.
  void OnForwarded(std::string_view tmpl);
  // Draining: nothing more is read (a late reply's entries stay pending, unclaimed).
  void Stop();

 private:
  struct Stream {
    std::string key;
    int tmpl = -1;  // -1: the intake
    bool group_ready = false;
    bool own_scan = true;      // own pending entries still to be read
    bool in_flight = false;    // a read of this stream is outstanding
    // Forward queues: reasons to read it (announcements, heartbeats) so far, and how many of
    // them the last read that found it empty had covered. Equal: nothing to read.
    uint64_t wakes = 1, wakes_read = 0;
    std::vector<std::string> orphans;  // pending entries of dead daemons, oldest first
  };

  size_t Capacity(const Stream& s) const;
  void CreateGroups();
  void ScanOwn(size_t i);
  void ClaimOrphans(size_t i);
  void ReadForward(size_t i);
  void ReadIntake();
  void FindOrphans();
  void ListPending(std::shared_ptr<std::set<std::string>> alive, std::function<void()> done);
  void TakeOrphanList(size_t i, redisReply* pending, const std::set<std::string>& alive);
  void Deliver(redisReply* entries, const std::string& stream);

  RedisAsync* reader_;
  RedisAsync* cmd_;
  const Keys& keys_;
  const DaemonConfig& config_;
  Hooks hooks_;
  std::vector<Stream> streams_;
  bool stopped_ = false;
  bool orphan_search_in_flight_ = false;
  bool orphans_checked_ = false;  // the first look for orphans since connecting is done
  int64_t cmd_connected_since_us_ = 0;  // 0: not connected
};

}  // namespace sandpool
