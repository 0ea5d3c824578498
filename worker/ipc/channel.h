// Channel: framed messages over a SOCK_STREAM unix socket, with file descriptors attached to
// frames (SCM_RIGHTS). Used between the scheduler and keepers, and between the spawner and the
// scheduler.
//
// Frame: u32 payload length, u16 type, u16 fd count (little endian), then the payload. A frame's
// fds travel in the same sendmsg as its first byte, so the kernel delivers them no later than
// the frame's bytes; the receiver keeps received fds in arrival order and hands each complete
// frame the number it declares.
//
// Two modes over the same framing:
//  - blocking (keeper, spawner): Send() writes the whole frame, Receive() blocks for one frame;
//  - non-blocking (scheduler loop): Send() queues what the socket does not take (the owner must
//    call Flush() when the fd is writable while HasQueued()), OnReadable() reads the socket
//    into complete frames until it has no more or a read comes back short. Callers must be
//    level-triggered (poll, libevent without EV_ET): what is left wakes them again.
// OnReadable() never blocks, whatever the fd's mode (MSG_DONTWAIT), and keeps a partial frame
// until the rest arrives, so a process that must also watch other fds (the keeper) can read
// frames with it from a blocking socket and still send with blocking writes.
// Not thread-safe. Received fds are O_CLOEXEC (MSG_CMSG_CLOEXEC).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "common/fd.h"
#include "common/status.h"

namespace sandpool {

struct Frame {
  uint16_t type = 0;
  std::string payload;
  std::vector<UniqueFd> fds;
};

class Channel {
 public:
  static constexpr size_t kMaxPayload = 64u << 20;  // larger frames are a protocol error
  static constexpr size_t kMaxFds = 8;

  Channel() = default;
  explicit Channel(UniqueFd fd) : fd_(std::move(fd)) {}

  int fd() const { return fd_.get(); }
  bool valid() const { return fd_.valid(); }
  void Close() { fd_.reset(); }
  // The socket, for another Channel to go on with; invalid (and the socket closed) if anything
  // is buffered either way: a frame half read or half written cannot be carried over.
  UniqueFd TakeFd() {
    UniqueFd fd = std::move(fd_);
    if (!in_.empty() || !in_fds_.empty() || HasQueued() || big_len_ != 0) fd.reset();
    in_.clear();
    in_fds_.clear();
    big_ = Frame();
    big_len_ = big_have_ = 0;
    out_.clear();
    out_off_ = 0;
    return fd;
  }

  // Sends a frame. `fds` are borrowed (duplicated into the peer by the kernel). In blocking mode
  // this writes everything; in non-blocking mode the unsent tail is queued (fds are always sent
  // with the first byte, so they never wait in the queue).
  Status Send(uint16_t type, std::string_view payload, const std::vector<int>& fds = {});
  // The same without fds, taking the payload: when the socket does not take all of it, its
  // buffer becomes the queue instead of a copy of its tail (a session's file: up to 32 MiB).
  Status SendOwned(uint16_t type, std::string payload);
  // The same for a payload of two parts, `head` then `tail`, sent without joining them (the head
  // of a message whose last field is a file's bytes, and those bytes). The tail's buffer becomes
  // the queue once the socket has taken the frame's header and head; before that it is copied.
  Status SendOwned(uint16_t type, std::string_view head, std::string tail);
  // Non-blocking mode: writes queued bytes. Returns OK when drained or EAGAIN was hit.
  Status Flush();
  bool HasQueued() const { return out_off_ < out_.size(); }
  size_t QueuedBytes() const { return out_.size() - out_off_; }

  // Blocking mode: receives one whole frame. EOF before a frame -> error with sys_errno 0.
  Result<Frame> Receive();
  // Non-blocking mode: reads what is available (see above) and appends complete frames to `out`.
  // Returns an error on EOF (sys_errno 0) or a socket/protocol error; frames parsed before the
  // error are still appended.
  Status OnReadable(std::vector<Frame>* out);
  // Gives back the memory of the buffers when nothing is buffered (after a large frame they keep
  // its size; an idle reader may not want to keep that).
  void ReleaseIdleBuffers() {
    if (in_.empty()) std::string().swap(in_);
    if (out_off_ >= out_.size()) {
      std::string().swap(out_);
      out_off_ = 0;
    }
  }

 private:
  // short_read (if given): set when the read returned less than it could take.
  Status ReadSome(bool* eof, bool* would_block, int flags, bool* short_read = nullptr);
  bool TakeFrame(Frame* f, Status* err);
  // The first `n` received fds, a frame's (REQUIRES: that many received), into `to`.
  void TakeFds(uint16_t n, std::vector<UniqueFd>* to);
  // Send and SendOwned: `own`, when given, is the string `payload` views, whose buffer may become
  // the queue.
  // `head` (may be empty) goes before `payload`; the frame's payload is the two.
  Status SendFrame(uint16_t type, std::string_view head, std::string_view payload, const std::vector<int>& fds,
                   std::string* own);
  // Queues what a send left (`sent` bytes of the header, then of head and payload, went out),
  // taking `own`'s buffer for it when given and the header and head are out.
  // REQUIRES: nothing queued before the send.
  void Queue(const char* header, std::string_view head, size_t sent, std::string_view payload, std::string* own);

  // Frames of at least this many bytes are read straight into their payload (big_).
  static constexpr size_t kDirectRead = 128u << 10;

  UniqueFd fd_;
  std::string in_;
  std::deque<UniqueFd> in_fds_;
  // The large frame being read (big_len_ != 0): its type, fds and the big_have_ bytes of its
  // big_len_ that arrived, in its payload.
  Frame big_;
  size_t big_len_ = 0;
  size_t big_have_ = 0;
  std::string out_;
  size_t out_off_ = 0;
};

}  // namespace sandpool
