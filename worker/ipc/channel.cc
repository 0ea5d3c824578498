#include "worker/ipc/channel.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "worker/ipc/fd_passing.h"

namespace sandpool {
namespace {

constexpr size_t kHeader = 8;

void PutHeader(char* h, uint32_t len, uint16_t type, uint16_t nfds) {
  for (int i = 0; i < 4; ++i) h[i] = static_cast<char>(len >> (8 * i));
  h[4] = static_cast<char>(type);
  h[5] = static_cast<char>(type >> 8);
  h[6] = static_cast<char>(nfds);
  h[7] = static_cast<char>(nfds >> 8);
}

}  // namespace

Status Channel::Send(uint16_t type, std::string_view payload, const std::vector<int>& fds) {
  return SendFrame(type, {}, payload, fds, nullptr);
}

Status Channel::SendOwned(uint16_t type, std::string payload) {
  return SendFrame(type, {}, payload, {}, &payload);
}

Status Channel::SendOwned(uint16_t type, std::string_view head, std::string tail) {
  return SendFrame(type, head, tail, {}, &tail);
}

Status Channel::SendFrame(uint16_t type, std::string_view head, std::string_view payload, const std::vector<int>& fds,
                          std::string* own) {
  if (!fd_.valid()) return Status::Error("channel closed");
  size_t size = head.size() + payload.size();
  if (size > kMaxPayload || fds.size() > kMaxFds) return Status::Error("frame too large");
  char header[kHeader];
  PutHeader(header, static_cast<uint32_t>(size), type, static_cast<uint16_t>(fds.size()));

  // Anything already queued must go first; then this frame can only be appended.
  if (HasQueued()) {
    if (!fds.empty()) {
      // Must not send fds ahead of queued bytes: drain first (the queue is small in practice).
      SP_RETURN_IF_ERROR(Flush());
      if (HasQueued()) return Status::Error("channel congested; cannot attach fds", EAGAIN);
    } else {
      out_.append(header, kHeader);
      out_.append(head);
      out_.append(payload);
      return Flush();
    }
  }

  struct iovec iov[3];
  int n_iov = 0;
  iov[n_iov++] = {header, kHeader};
  if (!head.empty()) iov[n_iov++] = {const_cast<char*>(head.data()), head.size()};
  if (!payload.empty()) iov[n_iov++] = {const_cast<char*>(payload.data()), payload.size()};
  size_t total = kHeader + size;
  alignas(struct cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
  struct msghdr msg = {};
  msg.msg_iov = iov;
  msg.msg_iovlen = static_cast<size_t>(n_iov);
  if (!fds.empty()) {
    msg.msg_control = cbuf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do {
    n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno != EAGAIN) return ErrnoStatus("sendmsg");
    if (!fds.empty()) return Status::Error("channel congested; cannot attach fds", EAGAIN);
    n = 0;
  }
  if (static_cast<size_t>(n) == total) return Status::Ok();
  Queue(header, head, static_cast<size_t>(n), payload, own);
  return Flush();
}

void Channel::Queue(const char* header, std::string_view head, size_t sent, std::string_view payload,
                    std::string* own) {
  out_.clear();  // nothing queued (the callers sent only when nothing was): what is here was sent
  out_off_ = 0;
  if (sent < kHeader) out_.append(header + sent, kHeader - sent);
  size_t head_sent = sent > kHeader ? std::min(sent - kHeader, head.size()) : 0;
  out_.append(head.substr(head_sent));
  size_t from = sent > kHeader + head.size() ? sent - kHeader - head.size() : 0;
  if (own != nullptr && out_.empty()) {
    out_ = std::move(*own);  // its buffer is the queue: the unsent tail is not copied
    out_off_ = from;
  } else {
    out_.append(payload.data() + from, payload.size() - from);
  }
}

Status Channel::Flush() {
  while (HasQueued()) {
    ssize_t n = ::send(fd_.get(), out_.data() + out_off_, out_.size() - out_off_, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return Status::Ok();
      return ErrnoStatus("send");
    }
    out_off_ += static_cast<size_t>(n);
  }
  out_.clear();
  out_off_ = 0;
  return Status::Ok();
}

Status Channel::ReadSome(bool* eof, bool* would_block, int flags, bool* short_read) {
  *eof = false;
  *would_block = false;
  char buf[65536];
  alignas(struct cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds * 2)];
  struct iovec iov = {buf, sizeof buf};
  if (big_len_ != 0) {
    // The rest of a large frame, into its payload, never past its end (the next frame's bytes
    // and fds are read the usual way). Its size runs at most a step (1 MiB) ahead of what has
    // arrived, within the capacity reserved at its start: a peer that declares a large frame and
    // sends little costs little memory.
    if (big_.payload.size() == big_have_) big_.payload.resize(big_have_ + std::min<size_t>(big_len_ - big_have_, 1u << 20));
    iov = {big_.payload.data() + big_have_, big_.payload.size() - big_have_};
  }
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = cbuf;
  msg.msg_controllen = sizeof cbuf;
  ssize_t n;
  do {
    n = ::recvmsg(fd_.get(), &msg, MSG_CMSG_CLOEXEC | flags);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN) {
      *would_block = true;
      return Status::Ok();
    }
    return ErrnoStatus("recvmsg");
  }
  ForEachReceivedFd(&msg, [this](int fd) { in_fds_.emplace_back(fd); });
  if (msg.msg_flags & MSG_CTRUNC) return Status::Error("recvmsg: control data truncated");
  if (n == 0) {
    *eof = true;
    return Status::Ok();
  }
  if (big_len_ != 0) {
    big_have_ += static_cast<size_t>(n);
  } else {
    in_.append(buf, static_cast<size_t>(n));
  }
  if (short_read != nullptr) *short_read = static_cast<size_t>(n) < iov.iov_len;
  return Status::Ok();
}

void Channel::TakeFds(uint16_t n, std::vector<UniqueFd>* to) {
  to->clear();
  for (uint16_t i = 0; i < n; ++i) {
    to->push_back(std::move(in_fds_.front()));
    in_fds_.pop_front();
  }
}

bool Channel::TakeFrame(Frame* f, Status* err) {
  if (big_len_ != 0) {
    if (big_have_ < big_len_) return false;
    *f = std::move(big_);
    big_ = Frame();
    big_len_ = big_have_ = 0;
    return true;
  }
  if (in_.size() < kHeader) return false;
  const auto* h = reinterpret_cast<const unsigned char*>(in_.data());
  uint32_t len = h[0] | (h[1] << 8) | (h[2] << 16) | (uint32_t{h[3]} << 24);
  uint16_t type = static_cast<uint16_t>(h[4] | (h[5] << 8));
  uint16_t nfds = static_cast<uint16_t>(h[6] | (h[7] << 8));
  if (len > kMaxPayload || nfds > kMaxFds) {
    *err = Status::Error("channel: malformed frame header");
    return false;
  }
  if (in_.size() < kHeader + len) {
    // A large frame whose fds are here (they come with its first byte): the rest of it is read
    // into its payload directly (ReadSome), not through in_ and a copy out of it. Everything in
    // in_ is this frame's: the frames before it were taken.
    if (len >= kDirectRead && in_fds_.size() >= nfds) {
      big_.type = type;
      big_.payload.reserve(len);
      big_.payload.assign(in_, kHeader, std::string::npos);
      TakeFds(nfds, &big_.fds);
      big_have_ = big_.payload.size();
      big_len_ = len;
      in_.clear();
    }
    return false;
  }
  if (in_fds_.size() < nfds) {
    *err = Status::Error("channel: frame declares more fds than were received");
    return false;
  }
  f->type = type;
  f->payload.assign(in_, kHeader, len);
  TakeFds(nfds, &f->fds);
  in_.erase(0, kHeader + len);
  return true;
}

Result<Frame> Channel::Receive() {
  for (;;) {
    Frame f;
    Status err;
    if (TakeFrame(&f, &err)) return f;
    if (!err.ok()) return err;
    bool eof, would_block;
    SP_RETURN_IF_ERROR(ReadSome(&eof, &would_block, 0));
    if (eof) return Status::Error("channel: peer closed");
    if (would_block) return Status::Error("channel: socket is non-blocking", EAGAIN);
  }
}

Status Channel::OnReadable(std::vector<Frame>* out) {
  for (;;) {
    bool eof, would_block, short_read = false;
    // MSG_DONTWAIT: a frame that arrived in part stays buffered here, whatever the fd's mode,
    // so a reader never blocks waiting for the rest of it.
    Status s = ReadSome(&eof, &would_block, MSG_DONTWAIT, &short_read);
    for (;;) {
      Frame f;
      Status err;
      if (!TakeFrame(&f, &err)) {
        if (!err.ok()) return err;
        break;
      }
      out->push_back(std::move(f));
    }
    if (!s.ok()) return s;
    if (eof) return Status::Error("channel: peer closed");
    // A short read took all the socket held (or stopped where the next frame's fds begin): the
    // next read would most likely say EAGAIN, one system call per wake-up for nothing. What is
    // left, or arrives, wakes a level-triggered caller again (all of them poll or use libevent).
    if (would_block || short_read) return Status::Ok();
  }
}

}  // namespace sandpool
