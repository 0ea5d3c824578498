#include "scheduler/jobs/loop_channel.h"

namespace sandpool {

LoopChannel::~LoopChannel() { Close(); }

void LoopChannel::Open(struct event_base* base, UniqueFd fd, FrameHandler on_frame, ClosedHandler on_closed) {
  base_ = base;
  (void)SetNonBlocking(fd.get());
  channel_ = Channel(std::move(fd));
  on_frame_ = std::move(on_frame);
  on_closed_ = std::move(on_closed);
  failed_ = false;
  read_ev_ = event_new(base_, channel_.fd(), EV_READ | EV_PERSIST, &LoopChannel::OnEvent, this);
  write_ev_ = event_new(base_, channel_.fd(), EV_WRITE | EV_PERSIST, &LoopChannel::OnEvent, this);
  event_add(read_ev_, nullptr);
}

void LoopChannel::Close() { (void)Release(); }  // the fd given back closes here

UniqueFd LoopChannel::Release() {
  if (read_ev_ != nullptr) event_free(read_ev_);
  if (write_ev_ != nullptr) event_free(write_ev_);
  read_ev_ = write_ev_ = nullptr;
  UniqueFd fd = channel_.TakeFd();
  channel_ = Channel();
  return fd;
}

Status LoopChannel::Send(uint16_t type, std::string_view payload, const std::vector<int>& fds) {
  if (!open()) return Status::Error("channel closed");
  return Sent(channel_.Send(type, payload, fds));
}

Status LoopChannel::SendOwned(uint16_t type, std::string payload) {
  return SendOwned(type, {}, std::move(payload));
}

Status LoopChannel::SendOwned(uint16_t type, std::string_view head, std::string tail) {
  if (!open()) return Status::Error("channel closed");
  return Sent(channel_.SendOwned(type, head, std::move(tail)));
}

Status LoopChannel::Sent(Status s) {
  if (!s.ok()) {
    // The peer is gone; the closed handler runs from the loop, not from inside the caller.
    event_active(read_ev_, EV_READ, 0);
    return s;
  }
  if (channel_.HasQueued()) event_add(write_ev_, nullptr);
  return s;
}

void LoopChannel::OnEvent(evutil_socket_t, short what, void* arg) {
  auto* self = static_cast<LoopChannel*>(arg);
  if (what & EV_WRITE) self->OnWritable();
  if ((what & EV_READ) && self->open()) self->OnReadable();
}

void LoopChannel::OnWritable() {
  Status s = channel_.Flush();
  if (!s.ok()) {
    Fail(s);
    return;
  }
  if (!channel_.HasQueued()) event_del(write_ev_);
}

void LoopChannel::OnReadable() {
  std::vector<Frame> frames;
  Status s = channel_.OnReadable(&frames);
  for (Frame& f : frames) {
    on_frame_(f);
    if (!open()) return;  // the handler closed us
  }
  if (!s.ok()) Fail(s);
}

void LoopChannel::Fail(const Status& why) {
  if (failed_) return;
  failed_ = true;
  ClosedHandler handler = on_closed_;
  Close();
  if (handler) handler(why);
}

}  // namespace sandpool
