// Attaches a hiredis async context to a libevent loop: hiredis's own libevent adapter
// (hiredis/adapters/libevent.h) with different read and write sides.
//
// Why the read side: hiredis reads 16 KiB per wake-up, and its adapter's read event is not
// persistent, so every wake-up cost an epoll_ctl to drop the event and another to add it back.
// Here the event stays, and one read() takes up to 256 KiB into hiredis's reader, then hiredis
// runs the callbacks (redisProcessCallbacks, as its own read does).
//
// Why the commands are written at once: hiredis asks for the socket's writability after every
// command, and watching for it cost two epoll_ctl calls and a wake-up per batch. The write is tried
// in the same loop turn instead (after the callbacks running, so a turn's commands go in one
// write); the socket is watched only for what it did not take. With the read side, the daemon's
// system calls per `echo` job fell from 54 to 41 (strace -c, 300 jobs).
//
// Why the write offset: hiredis 0.14's redisBufferWrite drops what one write() sent from the
// front of its output buffer with a memmove, after every write(). A command of B bytes over a
// socket that takes S bytes per write() therefore moves about B²/2S bytes: a session reading back
// a 1 MiB file (the result and its `exited` event, 2 MiB in one script call) spent 11% of the
// daemon's CPU in that memmove, and 16 MiB took over a second. Here the written prefix stays in
// the buffer and an offset moves on; the prefix is dropped once the buffer is all written (as
// hiredis does) or once it is at least 1 MiB and half the buffer, so each byte is moved at most
// about once.
//
// Contract: REQUIRES ac freshly connected (redisAsyncConnect*) and nothing attached yet; every
// write to the context's socket then goes through this adapter (hiredis writes an async context
// only from redisAsyncHandleWrite, which the adapter calls only before the connection is up and
// after a write error, with its own offset folded back into the buffer first). The adapter's
// state is freed by hiredis (ev.cleanup) with the context. Loop thread only.
#pragma once

#include <event2/event.h>
#include <hiredis/async.h>

namespace sandpool {

// Returns false when something is attached already (hiredis's REDIS_ERR).
bool AttachRedisToLoop(redisAsyncContext* ac, struct event_base* base);

}  // namespace sandpool
