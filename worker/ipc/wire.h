// How sandpool's internal messages are put on a channel (worker/ipc/channel.h frames): each message
// is a struct with MSGPACK_DEFINE_MAP (its members are its field list, once), packed as a msgpack
// map. Decoding never throws and is bounded: a container header is believed only up to the
// limits given (msgpack allocates what a header declares before reading any element, so a
// 5-byte payload could otherwise ask for 256 GiB), and trailing bytes are an error.
#pragma once

#include <msgpack.hpp>

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace sandpool {

struct WireLimits {
  size_t items, map_pairs, bytes, depth;
};
// Between sandpool's own processes (scheduler, spawner, keepers). The largest real message is a
// job's Run: argv and env items within the protocol's limits, strings within a frame.
inline constexpr WireLimits kInternalLimits{1u << 17, 1u << 12, 64u << 20, 8};
// Anything that may come from inside a sandbox (a session's agent), or to it.
inline constexpr WireLimits kSandboxLimits{1u << 16, 1u << 16, 32u << 20, 8};

template <typename M>
std::string EncodeMsg(const M& m) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, m);
  return std::string(buf.data(), buf.size());
}

template <typename M>
Status DecodeMsg(std::string_view in, M* m, const WireLimits& limits = kSandboxLimits) {
  try {
    msgpack::unpack_limit limit(limits.items, limits.map_pairs, limits.bytes, limits.bytes, 0, limits.depth);
    size_t off = 0;
    msgpack::object_handle oh = msgpack::unpack(in.data(), in.size(), off, nullptr, nullptr, limit);
    if (off != in.size()) return Status::Error("bad message: trailing bytes");
    oh.get().convert(*m);
  } catch (const std::exception& e) {
    return Status::Error(std::string("bad message: ") + e.what());
  }
  return Status::Ok();
}

}  // namespace sandpool
