// A Channel (worker/ipc/channel.h) driven by the daemon's libevent loop: frames are read when the
// socket is readable and handed to `on_frame` one by one; frames sent while the socket is full
// are queued and written when it becomes writable again. Nothing here ever blocks the loop.
//
// Why it exists: a job's Run frame can be megabytes (argv, environment and code), more than a
// socket takes at once. The unsent tail must be flushed when the socket drains; a frame left
// half-written leaves its keeper waiting for the rest forever (issue 11's wedged slots).
//
// Ownership: owns the channel's fd and both events. Callbacks run on the loop thread; either may
// call Close() (then no further callback runs for this channel), but must not destroy the
// LoopChannel itself from inside one.
#pragma once

#include <event2/event.h>

#include <functional>
#include <string_view>
#include <vector>

#include "common/fd.h"
#include "common/status.h"
#include "worker/ipc/channel.h"

namespace sandpool {

class LoopChannel {
 public:
  using FrameHandler = std::function<void(Frame& frame)>;
  // Runs once when the peer closed the channel or it failed (not after Close()).
  using ClosedHandler = std::function<void(const Status& why)>;

  LoopChannel() = default;
  ~LoopChannel();
  LoopChannel(const LoopChannel&) = delete;
  LoopChannel& operator=(const LoopChannel&) = delete;

  // REQUIRES: not open. Makes `fd` non-blocking and starts reading it.
  void Open(struct event_base* base, UniqueFd fd, FrameHandler on_frame, ClosedHandler on_closed);
  bool open() const { return channel_.valid(); }
  // Sends a frame; what the socket does not take now is queued and written as it drains. An
  // error means the peer is gone (the closed handler also runs, from the loop).
  // `fds` are borrowed and travel with the frame's first byte (never queued).
  Status Send(uint16_t type, std::string_view payload, const std::vector<int>& fds = {});
  // The same without fds, taking the payload: its buffer becomes the queue (Channel::SendOwned).
  Status SendOwned(uint16_t type, std::string payload);
  // The same for a payload of two parts, `head` then `tail` (Channel::SendOwned).
  Status SendOwned(uint16_t type, std::string_view head, std::string tail);
  size_t QueuedBytes() const { return channel_.QueuedBytes(); }
  // Frees the events and closes the fd; queued bytes are dropped.
  void Close();
  // Frees the events and gives the fd back, for the caller to open again later (a session
  // keeper kept for the next session): invalid if a frame was half read or half sent.
  UniqueFd Release();

 private:
  static void OnEvent(evutil_socket_t, short what, void* arg);
  void OnReadable();
  void OnWritable();
  void Fail(const Status& why);

  struct event_base* base_ = nullptr;
  // What a send did: arms the write event while bytes wait, or the read event to end a channel
  // whose peer is gone.
  Status Sent(Status s);

  Channel channel_;
  struct event* read_ev_ = nullptr;
  struct event* write_ev_ = nullptr;
  FrameHandler on_frame_;
  ClosedHandler on_closed_;
  bool failed_ = false;
};

}  // namespace sandpool
