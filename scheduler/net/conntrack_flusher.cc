#include "scheduler/net/conntrack_flusher.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include "worker/sandbox/conntrack_flush.h"

namespace sandpool {

ConntrackFlusher::~ConntrackFlusher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (wake_ev_) event_free(wake_ev_);
  if (deferred_ev_) event_free(deferred_ev_);
}

Status ConntrackFlusher::StartThread() {
  if (wake_ev_) return Status::Ok();
  wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_) return ErrnoStatus("eventfd");
  wake_ev_ = event_new(base_, wake_.get(), EV_READ | EV_PERSIST, &ConntrackFlusher::OnDone, this);
  if (wake_ev_ == nullptr || event_add(wake_ev_, nullptr) != 0) return Status::Error("conntrack flusher: event_add failed");
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void ConntrackFlusher::Flush(uint32_t sandbox_addr, std::function<void(Status)> done) {
  Status started = StartThread();
  if (!started.ok()) return Defer(std::move(started), std::move(done));
  {
    std::lock_guard<std::mutex> lock(mu_);
    todo_.push_back(std::make_unique<Request>(Request{sandbox_addr, std::move(done), Status::Ok()}));
  }
  cv_.notify_one();
}

void ConntrackFlusher::Defer(Status status, std::function<void(Status)> done) {
  deferred_.push_back(std::make_unique<Request>(Request{0, std::move(done), std::move(status)}));
  if (deferred_ev_ == nullptr) deferred_ev_ = evtimer_new(base_, &ConntrackFlusher::OnDone, this);
  timeval now{0, 0};
  if (deferred_ev_) evtimer_add(deferred_ev_, &now);
}

void ConntrackFlusher::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !todo_.empty(); });
    if (stopping_) return;
    std::unique_ptr<Request> r = std::move(todo_.front());
    todo_.pop_front();
    lock.unlock();
    r->result = FlushConntrackFrom(r->addr);
    lock.lock();
    done_.push_back(std::move(r));
    uint64_t one = 1;
    (void)::write(wake_.get(), &one, sizeof one);
  }
}

void ConntrackFlusher::OnDone(evutil_socket_t fd, short, void* arg) {
  auto* self = static_cast<ConntrackFlusher*>(arg);
  if (fd >= 0) {
    uint64_t n;
    (void)::read(fd, &n, sizeof n);
  }
  std::deque<std::unique_ptr<Request>> ready = std::move(self->deferred_);
  self->deferred_.clear();
  {
    std::lock_guard<std::mutex> lock(self->mu_);
    for (auto& r : self->done_) ready.push_back(std::move(r));
    self->done_.clear();
  }
  // A callback may destroy this object (the daemon stopping): nothing of it is touched after.
  for (auto& r : ready) r->done(std::move(r->result));
}

}  // namespace sandpool
