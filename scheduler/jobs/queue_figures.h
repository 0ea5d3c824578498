// The queue's figures an operator watches first, read from Redis every heartbeat and exported as
// metrics (docs/METRICS.md): entries pending (delivered, not acknowledged) and lagging (never
// delivered) in the consumer group, summed over the queue's streams (the intake and the
// template forward queues), and the age of the oldest entry no daemon has taken yet (the
// latency Sidekiq users page on). An entry's age counts from its first XADD: the `enqueued_ms`
// field a forward queue's entry carries (PROTOCOL.md section 1), else its id's time.
//
// Every daemon of a queue reports the same figures (they are the queue's, not the daemon's):
// aggregate them with max, not sum.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "metrics/metrics.h"
#include "scheduler/redis/redis_async.h"

namespace sandpool {

struct QueueFigures {
  double pending = 0, lag = 0;
  int64_t oldest_ms = 0;       // first XADD of the oldest entry no daemon has read; 0: none
  double oldest_age_s = 0;     // its age when the figures were read
};

// Sends XINFO GROUPS (and one XRANGE per stream with undelivered entries) on `cmd`; once every
// reply is in, sets the queue series of `metrics` and calls `done` with the figures. Nothing is
// set or called if a command could not be sent or its reply was lost (the figures then keep
// their last values until the next heartbeat).
void RefreshQueueFigures(RedisAsync* cmd, const std::vector<std::string>& streams, Metrics* metrics,
                         std::function<void(const QueueFigures&)> done);

// The milliseconds of a stream id ("1700000000000-0" -> 1700000000000); 0 if malformed.
int64_t StreamIdMs(const std::string& id);

}  // namespace sandpool
