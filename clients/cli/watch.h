// Following one job to its end (PROTOCOL.md section 2): subscribe to its event channel, stream
// its output as events arrive, and fall back to polling the durable result key whenever the live
// stream cannot be trusted (a sequence gap, a broken subscription, a long silence).
// Single-threaded and blocking; owns its two Redis connections.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "queue/keys.h"
#include "queue/protocol.h"
#include "queue/redis_sync.h"
#include "queue/redis_url.h"

namespace sandpool::cli {

struct WatchOptions {
  bool stream_output = true;  // write stdout/stderr events to fds 1/2 as they arrive
  int64_t deadline_us = -1;   // monotonic clock; -1: wait for ever
  int idle_check_ms = 2000;   // GET the result after this long without an event
  int poll_min_ms = 100;      // polling interval once the live stream was given up
  int poll_max_ms = 1000;
};

class JobWatcher {
 public:
  JobWatcher(RedisUrl url, Keys keys, std::string id, WatchOptions opts);

  // Connects both connections and SUBSCRIBEs to the job's channel, waiting for the server's
  // confirmation: after this returns OK, no event of the job can be missed.
  Status Subscribe();
  // The command connection (for the XADD that must follow Subscribe).
  SyncRedis& cmd() { return *cmd_; }

  // One GET of the result key: nullopt when there is none yet.
  Result<std::optional<JobResult>> FetchResult();

  // Blocks until the job's result is known. With stream_output, output events are written as
  // they come; the caller then prints the rest with PrintResultOutput(result, streamed_stdout(),
  // streamed_stderr()). Past the deadline: an error with sys_errno() ETIMEDOUT.
  Result<JobResult> Wait();

  // Bytes of the result's stdout/stderr already written (0 when the result comes from another
  // attempt than the one streamed).
  uint64_t streamed_stdout(const JobResult& r) const;
  uint64_t streamed_stderr(const JobResult& r) const;

 private:
  // Handles one pub/sub reply. Returns the result when it was the `exited` event.
  std::optional<JobResult> OnMessage(const redisReply& reply);
  // Polls the result key until it exists or the deadline passes, reconnecting as needed.
  Result<JobResult> PollResult();
  Status EnsureCmd();
  int RemainingMs(int cap) const;

  RedisUrl url_;
  Keys keys_;
  std::string id_;
  std::string channel_;
  WatchOptions opts_;
  std::unique_ptr<SyncRedis> cmd_;
  std::unique_ptr<SyncRedis> sub_;

  bool live_ = true;          // events can still be trusted
  uint64_t next_seq_ = 0;
  uint32_t attempt_ = 0;      // attempt of the streamed output (0: no `started` seen)
  uint64_t out_bytes_ = 0;
  uint64_t err_bytes_ = 0;
};

}  // namespace sandpool::cli
