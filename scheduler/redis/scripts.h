// The Lua scripts that make job and session state changes atomic in Redis. Sent as EVALSHA by
// their SHA-1 (common/sha1.h), loaded on every connect (RedisAsync::PreloadScripts), with EVAL as
// the fallback when Redis answers NOSCRIPT (a SCRIPT FLUSH, or a restart since the connect). The
// job hash's fields are documented in PROTOCOL.md section 4.
//
// Completion records (PROTOCOL.md section 21). A notify target is "" (none), "<name>" or "<name>!"
// (the record carries the result); it names the stream <prefix>:notify:<name>, whose TTL is set
// once per script, when it ends. The job hash's
// `notify` field lists the targets of every entry of the id (the owner's and its duplicates'), so
// the one FINISH tells them all.
//
// CLAIM and FINISH take a batch: N entries in one call (JobLedger sends what one loop turn
// gathered), with the same effect as N calls of one entry each, in that order. Each entry runs
// under pcall: one that fails (a key of the wrong type...) gets an error verdict of its own
// (Redis's message) and the others go on. (A failure leaves what that entry had written, as a
// failing script of one entry did: both are idempotent when sent again.)
//
// CLAIM  KEYS: per entry: job hash, result key
//        ARGV: consumer, now ms, ttl s, prefix, then per entry: entry id, max attempts,
//              retry-own-claim ("1" when this daemon sent a claim for this entry before and lost
//              the reply: it never ran), the entry's notify target, job id
//   -> per entry, flat: verdict, attempt. "run" (attempt incremented: run it), "dup" (another
//      entry owns this id: ack and drop), "done" (a result exists: ack and drop), "cancelled" (a
//      client cancelled it before it started; attempt: the runs it had, 0 if none), "lost" (it
//      was running under a daemon that died and has no attempts left), "error" (attempt: the
//      message). For run/cancelled/lost the job hash now names this consumer, so the FINISH
//      below is accepted. A hash left from a run whose result expired is forgotten first: the
//      id is free again (and a cancel recorded after that run ended, with cancel_ms, belongs to
//      the new job). "done" appends a record of the stored result to the entry's notify stream;
//      "dup" adds the entry's target to the hash.
//
// FINISH KEYS: per entry: job hash, result key, queue stream, out channel; then the streams to
//              read (none, or the reader's: StreamReader::CarryRead)
//        ARGV: consumer, ttl s, group, prefix, read count, how many streams to read, then per
//              entry: entry id, attempt, result bytes,
//              exited-event bytes, job id, the result's outcome, exit code ("" for nil) and error
//              code ("" for none) for the completion records (an empty outcome: read from the
//              bytes), the stage key ("" for none), n, then n live events held back
//              (JobLedger::Publish), published first, in order. With a stage key, the result
//              bytes and the exited event are "": the caller SET the result at the stage key just
//              before the call, the script RENAMEs it to the result key (or DELs it when the
//              verdict is not "ok"), and the caller publishes the exited event once it hears "ok".
//              Large results go this way so that Redis never makes them Lua strings.
//   -> per entry: "ok" (stored, published, a record appended to each of the hash's notify
//      targets, acked, deleted), "fenced" (another daemon took the job over because this one
//      was presumed dead: nothing written), "dup" (the id belongs to another entry: nothing
//      written; the caller acks and drops this entry), or an error message. The entries that
//      end "ok" are acked and deleted with one XACK and one XDEL per stream. Events (live and
//      exited) go only to channels someone listens to when the script runs (a pattern
//      subscriber, or PUBSUB NUMSUB > 0): PUBLISH delivers nothing else, and a subscriber that
//      came first (PROTOCOL.md section 2) is counted. With streams to read, one more element
//      comes last: the reply of XREADGROUP GROUP <group> <consumer> COUNT <read count> STREAMS
//      <them> > ..., run after everything above (nil when they held nothing new, or its error).
//
// REJECT KEYS: result key, queue stream, out channel
//        ARGV: entry id, result bytes, ttl s, exited-event bytes, group, prefix, notify target,
//              job id, and the result's outcome, exit code and error code as for FINISH
//   -> "ok". An entry that cannot run: its error result is stored (unless the id already has a
//      result: idempotency), published, a record of the stored result appended to the entry's
//      notify target, and the entry acked and deleted. No job hash is made.
//
// CANCEL_QUEUED KEYS: job hash, result key, out channel
//        ARGV: result bytes, ttl s, exited-event bytes, consumer
//   -> "ok" when the job was cancelled and not running (its cancelled result is stored now; the
//      entry is dropped as "done" whenever a daemon reads it), else why not: "done", "running",
//      "not-cancelled".
//
// REFRESH KEYS: the stream of each entry   ARGV: consumer, group, then each entry id
//   -> the positions (1-based) of the entries this consumer no longer owns (another daemon took
//      them over, or they are gone; an id alone would not say of which stream); the idle time of
//      the others is reset (their lease renewed).
//
// FORWARD KEYS: from stream, to stream, job hash     ARGV: entry id, group
//   -> the new entry's id ("" if the entry was gone). Moves a stream entry to another stream
//      (a template's forward queue), keeping its fields and the time it was first queued
//      (field enqueued_ms), acking and deleting the original. A job whose hash names the old
//      entry (claimed before: a dead daemon's job a peer reclaimed) is pointed at the new one,
//      so that CLAIM takes the moved entry for the same job, not for a duplicate to drop.
//
// CANCEL_FLAGS KEYS: job hashes            ARGV: none
//   -> the 1-based indices of the hashes whose `cancel` is "1".
//
// Sessions (PROTOCOL.md sections 12-14). These scripts also touch keys they compute from their
// arguments (the holder's stream, set members' records): fine on one Redis (the daemon never
// talks to a cluster), and it keeps each step atomic.
//
// SESSION_ROUTE KEYS: session intake stream, session record, sessions set
//        ARGV: entry id, group, consumer, holder-stream prefix ("<p>:sreq:<queue>:"), now ms,
//              op, op id, request bytes, session id, host-sessions prefix ("<p>:host-sessions:"),
//              session-hosts set
//   -> "gone" (the entry is no longer pending for this consumer: nothing done), "none" (no
//      session has that id and the op is not a create: nothing done, the caller answers), or the
//      holder's consumer name: the entry was moved to the holder's stream (acked and deleted
//      here). A create of an id nobody holds makes its record first (state "creating", held by
//      this consumer).
//
// SESSION_EXPIRE KEYS: session intake stream, result key, out channel
//        ARGV: entry id, group, result bytes, ttl s, exited-event bytes
//   -> "ok" when the entry was still waiting, undelivered (nobody had room for it), and was
//      answered (its result stored and published, the entry deleted); "taken" otherwise.
//
// SESSION_WRITE KEYS: session record, sessions set, host-sessions set (the holder's),
//        session-hosts set
//        ARGV: session id, holder consumer, then the record's fields and values
//   -> "ok". Writes a session's record whole (PROTOCOL.md section 13), makes it permanent, and
//      lists it (all sessions, this holder's) and the holder (hosts that hold sessions), in one
//      step: a peer never sees a record its sets do not list, or the reverse.
//
// SESSION_FORGET KEYS: session record, sessions set, host-sessions set (the holder's)
//        ARGV: session id, holder consumer, ttl s
//   -> "ok". The session is gone: its record says "destroyed" for ttl s, then goes; it is no
//      longer listed, so its id is free.
//
// SESSION_LOSE KEYS: the dead daemon's host-sessions set
//        ARGV: record prefix ("<p>:session:"), message
//   -> how many of its sessions were marked "lost" (every one not destroyed or lost already).
#pragma once

#include <vector>

namespace sandpool {

extern const char* const kClaimScript;
extern const char* const kFinishScript;
extern const char* const kRejectScript;
extern const char* const kCancelQueuedScript;
extern const char* const kRefreshScript;
extern const char* const kForwardScript;
extern const char* const kCancelFlagsScript;
extern const char* const kSessionRouteScript;
extern const char* const kSessionExpireScript;
extern const char* const kSessionLoseScript;
extern const char* const kSessionWriteScript;
extern const char* const kSessionForgetScript;

// Every script above (RedisAsync::PreloadScripts).
const std::vector<const char*>& AllScripts();

}  // namespace sandpool
