// Forgetting a narrowed slot's flows (worker/sandbox/conntrack_flush.h) without blocking the daemon's
// loop: FlushConntrackFrom reads the whole conntrack table (a dump, filtered in userspace; the
// kernel's dump filter knows marks and families, not addresses), which on a busy host takes
// long. So it runs on a thread of its own, one request after another, and each request's
// callback is called back on the loop, in order.
//
// The daemon never forks after its start-up (the spawner and the preview proxy are forked
// before any thread exists), so a thread here is safe; it is started at the first request, on
// the loop, long after those forks. Thread safety: every method on the loop's thread only.
#pragma once

#include <event2/event.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "common/fd.h"
#include "common/status.h"

namespace sandpool {

class ConntrackFlusher {
 public:
  explicit ConntrackFlusher(struct event_base* base) : base_(base) {}
  ConntrackFlusher(const ConntrackFlusher&) = delete;
  ConntrackFlusher& operator=(const ConntrackFlusher&) = delete;
  // Stops the thread after the request it is running (if any); callbacks not yet called are
  // dropped, never called.
  ~ConntrackFlusher();

  // Deletes every conntrack entry from `sandbox_addr` (host byte order) off the loop; `done`
  // is called on the loop with the outcome, never before Flush returned. An error starting
  // the thread is given to `done` the same way.
  void Flush(uint32_t sandbox_addr, std::function<void(Status)> done);
  // Calls `done(status)` from the loop soon, in order with the outcomes of Flush (a caller
  // whose request failed before it needed a flush has one path for both).
  void Defer(Status status, std::function<void(Status)> done);

 private:
  struct Request {
    uint32_t addr;
    std::function<void(Status)> done;
    Status result;
  };
  Status StartThread();
  void Run();
  static void OnDone(evutil_socket_t fd, short, void* arg);

  struct event_base* base_;
  UniqueFd wake_;  // eventfd: the thread finished a request
  struct event* wake_ev_ = nullptr;
  struct event* deferred_ev_ = nullptr;  // calls back Defer's requests from the loop
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                           // guarded by mu_
  std::deque<std::unique_ptr<Request>> todo_, done_;  // guarded by mu_
  std::deque<std::unique_ptr<Request>> deferred_;   // Defer's, on the loop only
};

}  // namespace sandpool
