// The two Lua scripts that make job state changes atomic in Redis (sent with EVAL; Redis caches
// them by hash, and EVAL survives SCRIPT FLUSH and restarts, unlike EVALSHA).
//
// CLAIM  KEYS: job hash, result key
//        ARGV: entry id, consumer, now ms, ttl s, max attempts, retry-own-claim ("1" when this
//              daemon sent a claim for this entry before and lost the reply: it never ran)
//   -> {verdict, attempt}: "run" (attempt incremented: run it), "dup" (another entry owns this
//      id: ack and drop), "done" (a result exists: ack and drop), "cancelled" (a client
//      cancelled it while queued), "lost" (it was running under a daemon that died and has no
//      attempts left). For run/cancelled/lost the job hash now names this consumer, so the
//      FINISH below is accepted.
//
// FINISH KEYS: job hash, result key, queue stream, out channel
//        ARGV: entry id, consumer, attempt, result bytes, ttl s, exited-event bytes, group
//   -> "ok" (stored, published, acked, deleted), "fenced" (another daemon took the job over
//      because this one was presumed dead: nothing written), "dup" (the id belongs to another
//      entry: nothing written; the caller acks and drops this entry).
#pragma once

namespace sandpool {

extern const char* const kClaimScript;
extern const char* const kFinishScript;

}  // namespace sandpool
