// The stream reader: which entries this daemon takes from Redis streams, and when. One reader
// serves both the job path and sessions, each with its own list of streams, all read through the
// consumer group `workers`:
//   jobs      (JobStreams) the intake clients write (`<prefix>:q:<queue>`, blocking) and one
//             forward queue per template (`<prefix>:fwd:<queue>:<template>`, read when woken),
//             where daemons move entries they read but could not start soon; dead daemons'
//             entries are reclaimed.
//   sessions  (sessions/sessions.h) this daemon's operation stream and the session intake, both
//             blocking; never reclaimed (a lost host's operations are answered: lost_hosts.h).
//
// Order of precedence, every time capacity frees up:
//  1. this consumer's own pending entries, after every (re)connect of either connection (a
//     previous run of this daemon died with them, or a reply was lost with a connection), page
//     by page from the last entry seen; entries the owner holds (being claimed or run here) are
//     skipped, so they are neither handed over twice nor read forever;
//  2. orphans (streams that reclaim): entries pending under a daemon that is gone (no connection
//     of its left in CLIENT LIST) and idle past the lease; looked for on connecting (before
//     anything new is read) and every heartbeat, but not while Redis itself has been up for less
//     than a lease (a restart drops every connection at once: every daemon gets that long to
//     come back), and claimed with XCLAIM's min-idle check (a refreshed lease wins the race);
//  3. streams read when woken, as many as their capacity, when they may hold something: Wake()
//     named them (a daemon announced a forward, from pub/sub), the last read found entries, or a
//     heartbeat came (pub/sub may lose the announcement); never just because capacity freed up
//     (that was most of Redis's calls per job); all of them in one XREADGROUP on the command
//     connection, at most the smallest capacity of each (a heartbeat wakes every template's);
//  4. the blocking streams that have capacity, in one XREADGROUP on the reader connection, at
//     most the smallest capacity of each.
// A read of the blocking streams may also ride along in a script call the owner makes anyway
// (CarryRead: the job path's FINISH, scripts.h), when nothing above goes first. It takes what they
// can take now or once the sandboxes being prepared are ready (capacity_ahead): on a busy queue,
// the entry for a slot is read with the result of the job that slot just ran, and is there when
// its next sandbox is, one round trip per job less than reading it then (issue 18: Redis round
// trips and CPU per job). Its entries are marked read_ahead.
// A daemon that is alive and connected never loses its entries, whatever the pause: only its
// connections disappearing (it died, or Redis dropped it) lets a peer take them.
//
// Ownership: the owner (Daemon or Sessions) owns it; the connections outlive it. Loop thread
// only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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
  struct StreamSpec {
    std::string key;
    std::function<size_t()> capacity;  // entries this daemon can take from it now
    bool blocking = true;    // read in the blocking read; else only when woken
    bool reclaim = true;     // dead daemons' pending entries of it are claimed here
    std::string wake_name;   // not blocking: the name Wake() takes (a template's)
    // Optional, blocking streams: entries it can take now or once the sandboxes being prepared
    // are ready (at least capacity()); a carried read takes that many. Unset: not carried.
    std::function<size_t()> capacity_ahead;
  };
  // A read to carry: XREADGROUP COUNT `count` of `streams` (each with ">"), as this consumer.
  struct CarriedRead {
    std::vector<std::string> streams;
    size_t count = 0;
    uint64_t seq = 0;
  };
  struct Hooks {
    // Entries read (StreamEntry::stream says from where); they are the owner's now.
    std::function<void(std::vector<StreamEntry>)> on_entries;
    // Whether an entry (of `stream`: ids are per stream) is already being handled here (reads
    // and own-pending scans skip those).
    std::function<bool(const std::string& stream, const std::string& entry)> holds;
    // Optional: false while the owner may not take entries (not ready yet, draining).
    std::function<bool()> may_read;
    // Optional: a read of a stream read when woken found nothing new in it, and no reason to
    // look again (Wake) came while it was on its way.
    std::function<void(const std::string& stream)> on_empty;
  };

  // `reader` carries the blocking read; everything else goes on `cmd`.
  StreamReader(RedisAsync* reader, RedisAsync* cmd, const Keys& keys, const DaemonConfig& config,
               std::vector<StreamSpec> streams, Hooks hooks);

  // The job path's streams: the intake, then one forward queue per configured template.
  static std::vector<StreamSpec> JobStreams(const Keys& keys, const DaemonConfig& config,
                                            std::function<size_t()> intake_capacity,
                                            std::function<size_t()> intake_capacity_ahead,
                                            std::function<size_t(uint32_t t)> template_capacity);

  // Every stream read, in the order given.
  std::vector<std::string> Streams() const;

  void OnReaderConnected();
  void OnReaderDisconnected();
  void OnCommandConnected();
  void OnCommandDisconnected();
  // Takes whatever capacity allows now (call when capacity frees up).
  void Read();
  // Every heartbeat: retries group creation, looks for orphans, reads the woken streams.
  void Heartbeat();
  // The stream(s) named `name` (all streams read when woken, if no stream has that name) may
  // hold entries: read them as soon as they have capacity.
  void Wake(std::string_view name);
  // The same without reading now (the caller is in the middle of handing entries over; the next
  // Read() takes it into account).
  void NoteWake(std::string_view name);
  // A read of the blocking streams that have a capacity_ahead, to ride along in a script call
  // on the command connection, or nothing: when one of them is being read already, when own
  // pending entries or orphans go first, or when none has room. The streams are in flight from
  // now until TakeCarried gets its reply; the caller hands it over exactly once.
  std::optional<CarriedRead> CarryRead();
  // The carried read's reply: the XREADGROUP's own (nil: nothing; an error), or nullptr when the
  // call's reply was lost, malformed or never sent: whatever the read took is pending here, and
  // the own scan finds it.
  void TakeCarried(const CarriedRead& read, redisReply* reply);
  // Draining: nothing more is read (a late reply's entries stay pending, unclaimed).
  void Stop();
  // Scans this consumer's own pending entries of each stream `wanted` names again, from the
  // start, as after a reconnect (entries a claim left unsure: JobLedger::TakeRescan).
  void RescanOwn(const std::function<bool(const std::string& stream)>& wanted);

 private:
  struct Stream {
    StreamSpec spec;
    bool group_ready = false;
    bool own_scan = true;      // own pending entries still to be read
    std::string scan_from = "0";  // the own scan's place
    bool in_flight = false;    // a read of this stream on the command connection is outstanding
    uint64_t carried = 0;      // the seq of the carried read in flight, 0 for none
    // Woken streams: reasons to read it (wakes, heartbeats) so far, and how many of them the
    // last read that found it empty had covered. Equal: nothing to read.
    uint64_t wakes = 1, wakes_read = 0;
    std::vector<std::string> orphans;  // pending entries of dead daemons, oldest first
  };

  bool Reclaims() const;
  void RestartScans();
  void CreateGroups();
  void ScanOwn(size_t i);
  void ClaimOrphans(size_t i);
  void ReadWoken(const std::vector<size_t>& which);
  void ReadBlocking();
  // The blocking streams a read may take now (not in flight, nothing going first, room), with
  // room counted by capacity() or, `ahead`, by capacity_ahead() (streams without one left out);
  // `count`: the smallest room among them (XREADGROUP's COUNT applies to each stream).
  std::vector<size_t> BlockingToRead(bool ahead, size_t* count) const;
  void FindOrphans();
  void ListPending(std::shared_ptr<std::set<std::string>> alive, std::function<void()> done);
  void TakeOrphanList(size_t i, redisReply* pending, const std::set<std::string>& alive);
  // Hands over `entries` (an XREADGROUP/XCLAIM entry array) of stream `stream`, skipping held ones.
  void Deliver(redisReply* entries, const std::string& stream, bool read_ahead = false);
  // Hands over every stream's entries of a multi-stream XREADGROUP reply; the keys of the streams
  // that had any (the reply names only those).
  std::set<std::string> DeliverStreams(redisReply* r, bool read_ahead = false);
  void RecheckGroups(const std::vector<size_t>& which);

  RedisAsync* reader_;
  RedisAsync* cmd_;
  const Keys& keys_;
  const DaemonConfig& config_;
  Hooks hooks_;
  std::vector<Stream> streams_;
  bool stopped_ = false;
  bool blocking_in_flight_ = false;
  bool orphan_search_in_flight_ = false;
  bool orphans_checked_ = false;  // the first look for orphans since connecting is done
  int64_t cmd_connected_since_us_ = 0;  // 0: not connected
  uint64_t carry_seq_ = 0;
};

}  // namespace sandpool
