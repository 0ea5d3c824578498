// libFuzzer harness: the frame parser of worker/ipc/channel.h. The input is a script a peer plays on
// one end of a socketpair, bytes and fds, while a Channel reads the other end with OnReadable as
// the scheduler does. Script operations, one byte each then their arguments (a missing byte
// reads as 0):
//   op % 4 == 0  raw     [n][k][n bytes]: one sendmsg of the bytes with k % 21 fds attached
//                        (more than a frame may carry, and more than the reader makes room for)
//   op % 4 == 1  frame   [type lo][type hi][k][n][cut][n bytes]: a well-formed frame with k % 9
//                        fds and an n-byte payload, sent as Channel::Send does (fds with the
//                        first byte): in one sendmsg when cut is 0, else in two, the first of
//                        1 + (cut - 1) % (8 + n) bytes
//   op % 4 == 2  read    the reader runs OnReadable now (it also runs when the socket is full)
//   op % 4 == 3  close   the peer closes its end; the script ends there
// After the script the peer closes its end and the reader reads until the channel reports the end
// (as a level-triggered owner does: OnReadable stops at a short read). The fds sent are
// write ends of pipes made once, each sent at most once per input, so a received fd is
// identified by its inode. Properties, beyond "no crash, leak or UBSan report":
//  - every frame the reader accepts is the next complete, well-formed frame of the byte stream
//    (same type and payload; length and fd count within kMaxPayload and kMaxFds);
//  - frames get fds in the order they were sent, as many as they declare, each O_CLOEXEC;
//  - a byte stream with a malformed header ends in an error, never in a clean EOF;
//  - a script of well-formed frames only is read completely: every frame, then EOF;
//  - once the channel, its frames and the peer are gone, no fd is left open.
#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/fd.h"
#include "tests/fuzz/fuzz_check.h"
#include "worker/ipc/channel.h"

namespace sandpool {
namespace {

constexpr size_t kHeader = 8;
constexpr size_t kPoolSize = 64;  // fds one input may send, in all
constexpr size_t kMaxRawFds = 20;

struct Pool {
  std::vector<PipePair> pipes;
  std::vector<ino_t> inodes;
};

const Pool& FdPool() {
  static const Pool* pool = [] {
    auto* p = new Pool;
    for (size_t i = 0; i < kPoolSize; ++i) {
      auto pipe = MakePipe();
      struct stat st;
      if (!pipe.ok() || ::fstat(pipe->write.get(), &st) != 0) {
        std::fprintf(stderr, "cannot make the fd pool\n");
        std::abort();
      }
      p->inodes.push_back(st.st_ino);
      p->pipes.push_back(std::move(pipe).value());
    }
    return p;
  }();
  return *pool;
}

// Open fds of this process; opendir's own fd counts in every call alike.
size_t OpenFds() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) std::abort();
  size_t n = 0;
  while (const struct dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

class Script {
 public:
  Script(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  bool done() const { return p_ >= end_; }
  uint8_t Byte() { return p_ < end_ ? *p_++ : 0; }
  std::string Bytes(size_t n) {
    std::string s;
    while (n-- > 0) s += static_cast<char>(Byte());
    return s;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

struct RefFrame {
  uint16_t type;
  std::string payload;
  uint16_t nfds;
};

class Session {
 public:
  Session() {
    auto sp = MakeSocketPair(SOCK_STREAM);
    if (!sp.ok()) std::abort();
    peer_ = std::move(sp->a);
    if (!SetNonBlocking(peer_.get()).ok() || !SetNonBlocking(sp->b.get()).ok()) std::abort();
    reader_ = Channel(std::move(sp->b));
  }

  // One sendmsg per chunk, the fds with its first byte; a full socket makes the reader read.
  // Returns false when nothing more can be sent (the reader failed and the socket is full).
  bool Send(const std::string& bytes, size_t nfds) {
    nfds = std::min(nfds, kPoolSize - fds_sent_);
    if (bytes.empty()) return true;  // a stream socket sends no fds without a byte
    size_t off = 0;
    while (off < bytes.size()) {
      alignas(struct cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxRawFds)];
      struct iovec iov = {const_cast<char*>(bytes.data() + off), bytes.size() - off};
      struct msghdr msg = {};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      if (off == 0 && nfds > 0) {
        msg.msg_control = cbuf;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        for (size_t i = 0; i < nfds; ++i) {
          int fd = FdPool().pipes[fds_sent_ + i].write.get();
          std::memcpy(CMSG_DATA(c) + i * sizeof(int), &fd, sizeof fd);
        }
      }
      ssize_t n = ::sendmsg(peer_.get(), &msg, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) {
        if (failed_) return false;
        Read();
        continue;
      }
      if (n < 0) {
        std::perror("sendmsg");
        std::abort();
      }
      if (off == 0) fds_sent_ += nfds;
      stream_.append(bytes, off, static_cast<size_t>(n));
      off += static_cast<size_t>(n);
    }
    return true;
  }

  void Read() {
    if (failed_) return;
    Status s = reader_.OnReadable(&frames_);
    if (!s.ok()) {
      failed_ = true;
      eof_ = s.message() == "channel: peer closed";
    }
  }

  // As a level-triggered owner does (every caller polls or uses libevent): read again while the
  // socket is readable, which at EOF it always is, until the channel reports the end. OnReadable
  // stops at a short read; each call consumes bytes or meets the end, so this ends.
  void CloseAndDrain() {
    peer_.reset();
    for (size_t i = 0; !failed_ && i < (1u << 20); ++i) Read();
  }

  void Play(Script& script) {
    while (!script.done()) {
      uint8_t op = script.Byte();
      switch (op % 4) {
        case 0: {
          size_t n = script.Byte();
          size_t k = script.Byte() % (kMaxRawFds + 1);
          wellformed_ = false;
          if (!Send(script.Bytes(n), k)) return;
          break;
        }
        case 1: {
          uint16_t type = script.Byte();
          type = static_cast<uint16_t>(type | (script.Byte() << 8));
          size_t k = script.Byte() % (Channel::kMaxFds + 1);
          k = std::min(k, kPoolSize - fds_sent_);  // the header must declare what is sent
          size_t n = script.Byte();
          size_t cut = script.Byte();
          cut = cut == 0 ? kHeader + n : 1 + (cut - 1) % (kHeader + n);
          std::string frame(kHeader, '\0');
          frame[0] = static_cast<char>(n);  // n < 256: the other length bytes stay 0
          frame[4] = static_cast<char>(type);
          frame[5] = static_cast<char>(type >> 8);
          frame[6] = static_cast<char>(k);
          frame += script.Bytes(n);
          if (!Send(frame.substr(0, cut), k) || !Send(frame.substr(cut), 0)) return;
          break;
        }
        case 2:
          Read();
          break;
        case 3:
          return;
      }
    }
  }

  void Check() const {
    // The byte stream as a correct reader would cut it.
    std::vector<RefFrame> ref;
    bool malformed = false;
    for (size_t pos = 0; stream_.size() - pos >= kHeader;) {
      const auto* h = reinterpret_cast<const unsigned char*>(stream_.data() + pos);
      uint32_t len = h[0] | (h[1] << 8) | (h[2] << 16) | (uint32_t{h[3]} << 24);
      uint16_t type = static_cast<uint16_t>(h[4] | (h[5] << 8));
      uint16_t nfds = static_cast<uint16_t>(h[6] | (h[7] << 8));
      if (len > Channel::kMaxPayload || nfds > Channel::kMaxFds) {
        malformed = true;
        break;
      }
      if (stream_.size() - pos - kHeader < len) break;
      ref.push_back({type, stream_.substr(pos + kHeader, len), nfds});
      pos += kHeader + len;
    }

    FUZZ_CHECK(frames_.size() <= ref.size(), "the reader accepts only complete, well-formed frames");
    size_t fd_index = 0;
    for (size_t i = 0; i < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      FUZZ_CHECK(f.type == ref[i].type && f.payload == ref[i].payload,
                 "an accepted frame is the next frame of the stream");
      FUZZ_CHECK(f.fds.size() == ref[i].nfds, "a frame gets the fds it declares");
      for (const UniqueFd& fd : f.fds) {
        FUZZ_CHECK(fd_index < fds_sent_, "no frame gets more fds than were sent");
        struct stat st;
        FUZZ_CHECK(::fstat(fd.get(), &st) == 0, "a received fd is open");
        FUZZ_CHECK(st.st_ino == FdPool().inodes[fd_index], "fds arrive in the order sent");
        FUZZ_CHECK((::fcntl(fd.get(), F_GETFD) & FD_CLOEXEC) != 0, "received fds are O_CLOEXEC");
        ++fd_index;
      }
    }
    FUZZ_CHECK(failed_, "a closed peer is reported");
    if (malformed) FUZZ_CHECK(!eof_, "a malformed header is an error, not a clean end");
    if (wellformed_) {
      FUZZ_CHECK(eof_, "well-formed frames end in EOF, not in an error");
      FUZZ_CHECK(frames_.size() == ref.size(), "every well-formed frame is read");
    }
  }

 private:
  UniqueFd peer_;
  Channel reader_;
  std::vector<Frame> frames_;
  std::string stream_;    // every byte the peer sent, in order
  size_t fds_sent_ = 0;   // FdPool().pipes[0 .. fds_sent_) went out, in that order
  bool wellformed_ = true;
  bool failed_ = false;   // OnReadable returned an error; the owner would drop the channel
  bool eof_ = false;      // ... and it was the peer's EOF
};

}  // namespace
}  // namespace sandpool

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandpool;
  (void)FdPool();
  // Counted around each input, not once for the run: between inputs libFuzzer may start its
  // symbolizer (for a NEW_FUNC line), which keeps two pipe ends open from then on.
  const size_t baseline = OpenFds();
  {
    Session session;
    Script script(data, size);
    session.Play(script);
    session.CloseAndDrain();
    session.Check();
  }
  FUZZ_CHECK(OpenFds() == baseline, "no fd outlives the channel, its frames and the peer");
  return 0;
}
