// First: hiredis 0.14's sds.h declares its functions without extern "C", and hiredis.h (through
// the header below) includes it before opening its own extern "C" block.
extern "C" {
#include <hiredis/sds.h>
}

#include "scheduler/redis/redis_libevent.h"

#include <unistd.h>

#include <cerrno>

namespace sandpool {
namespace {

// The written prefix is dropped from the buffer when it is this large and at least half of it.
constexpr size_t kCompactBytes = 1u << 20;

struct Events {
  redisAsyncContext* ac;
  struct event* rev;
  struct event* wev;
  size_t sent;  // bytes at the front of ac->c.obuf already written
};

void OnReadable(evutil_socket_t, short, void* arg) { redisAsyncHandleRead(static_cast<Events*>(arg)->ac); }

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
  event_add(e->rev, nullptr);  // replies follow writes (as redisAsyncHandleWrite does)
}

void AddRead(void* p) { event_add(static_cast<Events*>(p)->rev, nullptr); }
void DelRead(void* p) { event_del(static_cast<Events*>(p)->rev); }
void AddWrite(void* p) { event_add(static_cast<Events*>(p)->wev, nullptr); }
void DelWrite(void* p) { event_del(static_cast<Events*>(p)->wev); }

void Cleanup(void* p) {
  auto* e = static_cast<Events*>(p);
  event_free(e->rev);
  event_free(e->wev);
  delete e;
}

}  // namespace

bool AttachRedisToLoop(redisAsyncContext* ac, struct event_base* base) {
  if (ac->ev.data != nullptr) return false;
  auto* e = new Events{ac, nullptr, nullptr, 0};
  e->rev = event_new(base, ac->c.fd, EV_READ, &OnReadable, e);
  e->wev = event_new(base, ac->c.fd, EV_WRITE, &OnWritable, e);
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
