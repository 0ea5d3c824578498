// Which daemons are alive, as judged from Redis (docs/ARCHITECTURE.md, "Failure handling"): a
// daemon is alive while Redis lists any connection named for it (every connection names itself
// with CLIENT SETNAME, keys.h). No judgement is made while Redis itself has been up for less
// than a lease: a restart dropped every connection at once, and every daemon gets that long to
// come back. Used to reclaim the queue entries of dead daemons (stream_reader.h) and to declare
// their sessions lost (sessions.h).
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>

#include "queue/keys.h"
#include "scheduler/config/config.h"
#include "scheduler/redis/redis_async.h"

namespace sandpool {

// The consumers holding a live connection, from CLIENT LIST's text: the names
// "sandpoold:<prefix>:<consumer>:<conn>".
std::set<std::string> LiveConsumers(const std::string& client_list, const std::string& prefix);

// `done` gets the consumers alive (this daemon's own always among them), or nullopt when no
// judgement can be made now (Redis young, unreachable, or refusing). Returns false (and never
// calls `done`) if the first command could not be sent.
bool FindLiveDaemons(RedisAsync* cmd, const Keys& keys, const DaemonConfig& config,
                     std::function<void(std::optional<std::set<std::string>>)> done);

}  // namespace sandpool
