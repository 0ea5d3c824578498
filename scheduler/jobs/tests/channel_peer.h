// The test's end of a channel (worker/ipc/channel.h) whose other end a scheduler part owns: the
// test plays the keeper, the spawner or the agent on it, with the real framing. Header-only; for
// the tests of scheduler/ folders (jobs and those above it).
//
// Frames are read without blocking into `frames`: several frames sent together arrive in one
// read, and the ones after the first would otherwise wait inside the Channel, where poll() on the
// socket cannot see them.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <deque>
#include <utility>
#include <vector>

#include "common/fd.h"
#include "worker/ipc/channel.h"
#include "worker/ipc/messages.h"

namespace sandpool {

struct ChannelPeer {
  Channel ch;
  std::deque<Frame> frames;

  // A connected socket pair: {the end given to the part under test, the test's ChannelPeer}.
  static std::pair<UniqueFd, ChannelPeer> Make() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    ChannelPeer peer;
    peer.ch = Channel(UniqueFd(sv[1]));
    return {UniqueFd(sv[0]), std::move(peer)};
  }
  // Reads what has arrived; true when a frame waits.
  bool Poll() {
    struct pollfd p = {ch.fd(), POLLIN, 0};
    if (ch.valid() && frames.empty() && ::poll(&p, 1, 0) == 1) {
      std::vector<Frame> got;
      (void)ch.OnReadable(&got);  // EOF or an error: no more frames come
      for (Frame& f : got) frames.push_back(std::move(f));
    }
    return !frames.empty();
  }
  Frame Take() {
    Frame f = std::move(frames.front());
    frames.pop_front();
    return f;
  }
  Status Send(uint16_t type, std::string_view payload, const std::vector<int>& fds = {}) {
    return ch.Send(type, payload, fds);
  }
};

// The test as the spawner: its answer to a keeper request for `slot` (MsgType::kKeeper with the
// keeper's channel end and its pidfd). Returns the keeper's other end, which the test plays. The
// "pidfd" is /dev/null: nothing here may be signalled.
inline ChannelPeer KeeperStarted(ChannelPeer& spawner, uint32_t slot) {
  auto [theirs, keeper] = ChannelPeer::Make();
  UniqueFd pidfd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  EXPECT_TRUE(spawner.Send(static_cast<uint16_t>(MsgType::kKeeper), Encode(KeeperMsg{slot, 4242}),
                           {theirs.get(), pidfd.get()})
                  .ok());
  return std::move(keeper);
}

}  // namespace sandpool
