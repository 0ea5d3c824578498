// First: hiredis 0.14's sds.h declares its functions without extern "C", and hiredis.h (through
// the header below) includes it before opening its own extern "C" block.
extern "C" {
#include <hiredis/sds.h>
}

#include "scheduler/redis/redis_libevent.h"

#include <unistd.h>

#include <cerrno>
#include <memory>

// Defined and exported by libhiredis (0.14 and 1.x alike), called by redisAsyncHandleRead after
// its read, but not declared in async.h: the adapter reads itself, then hands the replies over.
extern "C" void redisProcessCallbacks(redisAsyncContext* ac);

namespace sandpool {
namespace {

// The written prefix is dropped from the buffer when it is this large and at least half of it.
constexpr size_t kCompactBytes = 1u << 20;
// One read() takes at most this much (hiredis reads 16 KiB per call, one call per wake-up).
constexpr size_t kReadBytes = 256u << 10;

struct Events {
  redisAsyncContext* ac;
  struct event* rev;    // persistent: hiredis keeps reading for the connection's whole life
  struct event* wev;    // added while the output buffer has bytes the socket did not take
  struct event* flush;  // no fd: made active to write in this loop turn, after its callbacks
  size_t sent;  // bytes at the front of ac->c.obuf already written
  bool flush_pending;
  std::unique_ptr<char[]> in;  // kReadBytes, from the first read
};

void OnReadable(evutil_socket_t, short, void* arg) {
  auto* e = static_cast<Events*>(arg);
  redisContext* c = &e->ac->c;
  // Connecting, or an error: hiredis's own path (it finishes the connect, or disconnects).
  if (!(c->flags & REDIS_CONNECTED) || c->err) return redisAsyncHandleRead(e->ac);
  if (!e->in) e->in = std::make_unique<char[]>(kReadBytes);
  ssize_t n;
  do {
    n = ::read(c->fd, e->in.get(), kReadBytes);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
  // End of stream or an error: hiredis reads again, meets it, and disconnects. (Nothing read in
  // this call is lost: this call read nothing.)
  if (n <= 0) return redisAsyncHandleRead(e->ac);
  // A reader in error refuses the bytes; redisProcessCallbacks then meets that error and
  // disconnects, as it would under hiredis's own read.
  redisReaderFeed(c->reader, e->in.get(), static_cast<size_t>(n));
  // Nothing after this: a callback may free the context, and this adapter with it.
  redisProcessCallbacks(e->ac);
}

// hiredis's own write path, for what only it knows how to do: finish a connect, and report an
// error (it disconnects and runs the callbacks). The offset is folded back into the buffer first.
void HandOver(Events* e) {
  redisContext* c = &e->ac->c;
  if (e->sent > 0) {
    sdsrange(c->obuf, static_cast<int>(e->sent), -1);
    e->sent = 0;
  }
  redisAsyncHandleWrite(e->ac);
}

void OnWritable(evutil_socket_t, short, void* arg) {
  auto* e = static_cast<Events*>(arg);
  e->flush_pending = false;
  redisContext* c = &e->ac->c;
  if (!(c->flags & REDIS_CONNECTED) || c->err) return HandOver(e);
  size_t len = sdslen(c->obuf);
  while (e->sent < len) {
    ssize_t n = ::write(c->fd, c->obuf + e->sent, len - e->sent);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) return HandOver(e);  // hiredis writes again, meets the error and disconnects
    e->sent += static_cast<size_t>(n);
  }
  if (e->sent == len) {
    // All written: a fresh buffer, as redisBufferWrite leaves it (the old one may be large).
    sdsfree(c->obuf);
    c->obuf = sdsempty();
    e->sent = 0;
    event_del(e->wev);
  } else {
    if (e->sent >= kCompactBytes && e->sent * 2 >= len) {
      sdsrange(c->obuf, static_cast<int>(e->sent), -1);
      e->sent = 0;
    }
    event_add(e->wev, nullptr);
  }
  event_add(e->rev, nullptr);  // replies follow writes (as redisAsyncHandleWrite does); no-op if added
}

void AddRead(void* p) { event_add(static_cast<Events*>(p)->rev, nullptr); }
void DelRead(void* p) { event_del(static_cast<Events*>(p)->rev); }

// hiredis asks for a write after every command. Watching the socket for it would cost two
// epoll_ctl calls and a wake-up per batch of commands; the socket almost always has room, so the
// write is tried at once, in this loop turn once the callbacks that may add more commands have
// run (every command of the turn in one write), and the socket is watched only for what it did not
// take. Before the connection is up, hiredis's connect needs the socket's writability itself.
void AddWrite(void* p) {
  auto* e = static_cast<Events*>(p);
  if (!(e->ac->c.flags & REDIS_CONNECTED)) {
    event_add(e->wev, nullptr);
  } else if (!e->flush_pending && !event_pending(e->wev, EV_WRITE, nullptr)) {
    e->flush_pending = true;
    event_active(e->flush, EV_WRITE, 0);
  }
}

void DelWrite(void* p) {
  auto* e = static_cast<Events*>(p);
  event_del(e->wev);
  event_del(e->flush);
  e->flush_pending = false;
}

void Cleanup(void* p) {
  auto* e = static_cast<Events*>(p);
  event_free(e->rev);
  event_free(e->wev);
  event_free(e->flush);
  delete e;
}

}  // namespace

bool AttachRedisToLoop(redisAsyncContext* ac, struct event_base* base) {
  if (ac->ev.data != nullptr) return false;
  auto* e = new Events{ac, nullptr, nullptr, nullptr, 0, false, nullptr};
  e->rev = event_new(base, ac->c.fd, EV_READ | EV_PERSIST, &OnReadable, e);
  e->wev = event_new(base, ac->c.fd, EV_WRITE, &OnWritable, e);
  e->flush = event_new(base, -1, 0, &OnWritable, e);
  ac->ev.addRead = &AddRead;
  ac->ev.delRead = &DelRead;
  ac->ev.addWrite = &AddWrite;
  ac->ev.delWrite = &DelWrite;
  ac->ev.cleanup = &Cleanup;
  ac->ev.data = e;
  event_add(e->rev, nullptr);
  event_add(e->wev, nullptr);
  return true;
}

}  // namespace sandpool
