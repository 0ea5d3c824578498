#include "worker/ipc/channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace sandpool {
namespace {

TEST(Channel, FramesAndFdsArriveTogetherAndInOrder) {
  auto sp = MakeSocketPair(SOCK_STREAM);
  ASSERT_TRUE(sp.ok());
  Channel a(std::move(sp->a)), b(std::move(sp->b));
  auto p1 = MakePipe();
  auto p2 = MakePipe();
  ASSERT_TRUE(p1.ok() && p2.ok());
  ASSERT_TRUE(a.Send(7, "first", {p1->write.get()}).ok());
  ASSERT_TRUE(a.Send(8, std::string(200000, 'x')).ok() || true);  // may queue in non-blocking use
  ASSERT_TRUE(a.Send(9, "", {p2->write.get(), p1->read.get()}).ok());

  auto f1 = b.Receive();
  ASSERT_TRUE(f1.ok()) << f1.status().message();
  EXPECT_EQ(f1->type, 7);
  EXPECT_EQ(f1->payload, "first");
  ASSERT_EQ(f1->fds.size(), 1u);
  // The received fd is the pipe's write end: data written through it comes out of p1->read.
  ASSERT_EQ(::write(f1->fds[0].get(), "z", 1), 1);
  char c;
  ASSERT_EQ(::read(p1->read.get(), &c, 1), 1);
  EXPECT_EQ(c, 'z');
  EXPECT_TRUE(::fcntl(f1->fds[0].get(), F_GETFD) & FD_CLOEXEC);

  auto f2 = b.Receive();
  ASSERT_TRUE(f2.ok());
  EXPECT_EQ(f2->type, 8);
  EXPECT_EQ(f2->payload.size(), 200000u);
  EXPECT_TRUE(f2->fds.empty());
  auto f3 = b.Receive();
  ASSERT_TRUE(f3.ok());
  EXPECT_EQ(f3->type, 9);
  EXPECT_EQ(f3->fds.size(), 2u);
}

TEST(Channel, NonBlockingReceiverAssemblesFrames) {
  auto sp = MakeSocketPair(SOCK_STREAM);
  ASSERT_TRUE(sp.ok());
  ASSERT_TRUE(SetNonBlocking(sp->b.get()).ok());
  Channel a(std::move(sp->a)), b(std::move(sp->b));
  std::vector<Frame> frames;
  EXPECT_TRUE(b.OnReadable(&frames).ok());
  EXPECT_TRUE(frames.empty());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(a.Send(static_cast<uint16_t>(i), std::to_string(i)).ok());
  ASSERT_TRUE(b.OnReadable(&frames).ok());
  ASSERT_EQ(frames.size(), 5u);
  EXPECT_EQ(frames[4].payload, "4");
  a.Close();
  Status s = b.OnReadable(&frames);
  EXPECT_FALSE(s.ok());  // EOF is reported
}

// OnReadable stops at a short read (the kernel ends a read where the next frame's fds begin); a
// caller that polls again while the socket is readable gets every frame, in order, fds included.
TEST(Channel, APollingReaderGetsEveryFrameThoughAReadStopsShort) {
  auto sp = MakeSocketPair(SOCK_STREAM);
  ASSERT_TRUE(sp.ok());
  ASSERT_TRUE(SetNonBlocking(sp->b.get()).ok());
  Channel a(std::move(sp->a)), b(std::move(sp->b));
  auto p = MakePipe();
  ASSERT_TRUE(p.ok());
  for (uint16_t i = 0; i < 6; ++i) {
    std::vector<int> fds;
    if (i % 2 == 0) fds = {p->write.get()};
    ASSERT_TRUE(a.Send(i, std::string(i == 3 ? 150000 : 10, static_cast<char>('a' + i)), fds).ok());
  }
  a.Close();
  std::vector<Frame> frames;
  Status s = Status::Ok();
  int reads = 0;
  for (; s.ok() && reads < 100; ++reads) {
    struct pollfd pfd = {b.fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&pfd, 1, 1000), 1);
    s = b.OnReadable(&frames);
  }
  EXPECT_FALSE(s.ok());  // ends at EOF, after every frame
  EXPECT_GT(reads, 1);   // the frames with fds did not come in one read
  ASSERT_EQ(frames.size(), 6u);
  for (uint16_t i = 0; i < 6; ++i) {
    EXPECT_EQ(frames[i].type, i);
    EXPECT_EQ(frames[i].payload.size(), i == 3 ? 150000u : 10u);
    EXPECT_EQ(frames[i].payload[0], static_cast<char>('a' + i));
    EXPECT_EQ(frames[i].fds.size(), i % 2 == 0 ? 1u : 0u);
  }
}

// Large frames (read straight into their payload; sent from a buffer the queue takes over) come
// out whole and in order between small ones, fds with the frames that carry them, whichever way
// the socket splits them.
TEST(Channel, LargeFramesArriveWholeAndInOrderBetweenSmallOnes) {
  auto sp = MakeSocketPair(SOCK_STREAM);
  ASSERT_TRUE(sp.ok());
  ASSERT_TRUE(SetNonBlocking(sp->a.get()).ok());
  ASSERT_TRUE(SetNonBlocking(sp->b.get()).ok());
  Channel a(std::move(sp->a)), b(std::move(sp->b));
  auto p = MakePipe();
  ASSERT_TRUE(p.ok());
  auto pattern = [](size_t n, int seed) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 7 + static_cast<size_t>(seed)) % 251);
    return s;
  };
  const size_t sizes[] = {5u << 20, 10, 300000, 131072, 3, 9u << 20};
  std::vector<Frame> frames;
  for (uint16_t i = 0; i < 6; ++i) {
    std::string payload = pattern(sizes[i], i);
    // Odd frames carry an fd; they go out with Send, which sends fds only with nothing queued:
    // let the reader drain until they can.
    if (i % 2 == 1) {
      while (a.HasQueued()) {
        ASSERT_TRUE(a.Flush().ok());
        ASSERT_TRUE(b.OnReadable(&frames).ok());
      }
      ASSERT_TRUE(a.Send(i, payload, {p->write.get()}).ok());
    } else {
      ASSERT_TRUE(a.SendOwned(i, std::move(payload)).ok());
    }
  }
  for (int rounds = 0; frames.size() < 6 && rounds < 100000; ++rounds) {
    ASSERT_TRUE(a.Flush().ok());
    ASSERT_TRUE(b.OnReadable(&frames).ok());
  }
  ASSERT_EQ(frames.size(), 6u);
  for (uint16_t i = 0; i < 6; ++i) {
    EXPECT_EQ(frames[i].type, i);
    EXPECT_TRUE(frames[i].payload == pattern(sizes[i], i)) << "frame " << i << ": " << frames[i].payload.size() << " bytes";
    EXPECT_EQ(frames[i].fds.size(), i % 2 == 1 ? 1u : 0u) << i;
  }
}

// A payload sent in two parts (SendOwned with a head) arrives as one, whichever way the socket
// splits it: all at once, within the tail (whose buffer the queue takes over), within the head (a
// head larger than the socket takes: the rest is copied into the queue), or behind a queue.
TEST(Channel, AFrameSentAsHeadAndTailArrivesAsOnePayload) {
  auto sp = MakeSocketPair(SOCK_STREAM);
  ASSERT_TRUE(sp.ok());
  ASSERT_TRUE(SetNonBlocking(sp->a.get()).ok());
  ASSERT_TRUE(SetNonBlocking(sp->b.get()).ok());
  Channel a(std::move(sp->a)), b(std::move(sp->b));
  auto pattern = [](size_t n, int seed) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 13 + static_cast<size_t>(seed)) % 253);
    return s;
  };
  const std::pair<size_t, size_t> sizes[] = {{10, 5u << 20}, {3, 10}, {900000, 1u << 20}, {0, 17}, {7, 0}, {20, 131072}};
  const size_t n = sizeof sizes / sizeof sizes[0];
  std::vector<Frame> frames;
  for (uint16_t i = 0; i < n; ++i) {
    if (i == 3) {  // the first three drained: this one meets an empty queue
      for (int rounds = 0; a.HasQueued() && rounds < 100000; ++rounds) {
        ASSERT_TRUE(a.Flush().ok());
        ASSERT_TRUE(b.OnReadable(&frames).ok());
      }
      ASSERT_FALSE(a.HasQueued());
    }
    ASSERT_TRUE(a.SendOwned(i, pattern(sizes[i].first, i), pattern(sizes[i].second, i + 100)).ok());
  }
  for (int rounds = 0; frames.size() < n && rounds < 100000; ++rounds) {
    ASSERT_TRUE(a.Flush().ok());
    ASSERT_TRUE(b.OnReadable(&frames).ok());
  }
  ASSERT_EQ(frames.size(), n);
  for (uint16_t i = 0; i < n; ++i) {
    EXPECT_EQ(frames[i].type, i);
    EXPECT_TRUE(frames[i].payload == pattern(sizes[i].first, i) + pattern(sizes[i].second, i + 100))
        << "frame " << i << ": " << frames[i].payload.size() << " bytes";
  }
}

// A peer that declares a large frame and ends before sending it: an error, not a frame.
TEST(Channel, ALargeFrameCutShortIsAnError) {
  auto sp = MakeSocketPair(SOCK_STREAM);
  ASSERT_TRUE(sp.ok());
  const unsigned char head[8] = {0, 0, 0, 2, 1, 0, 0, 0};  // 32 MiB declared
  ASSERT_EQ(::write(sp->a.get(), head, sizeof head), 8);
  ASSERT_EQ(::write(sp->a.get(), "0123456789", 10), 10);
  sp->a.reset();
  Channel b(std::move(sp->b));
  auto f = b.Receive();
  EXPECT_FALSE(f.ok());
}

TEST(Channel, RejectsMalformedHeader) {
  auto sp = MakeSocketPair(SOCK_STREAM);
  ASSERT_TRUE(sp.ok());
  const unsigned char bad[8] = {0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0};  // 4 GiB payload
  ASSERT_EQ(::write(sp->a.get(), bad, sizeof bad), 8);
  Channel b(std::move(sp->b));
  EXPECT_FALSE(b.Receive().ok());
}

}  // namespace
}  // namespace sandpool
