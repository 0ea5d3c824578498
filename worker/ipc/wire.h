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
#include "common/string_sink.h"

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
  std::string out;
  StringSink sink{&out};
  msgpack::pack(sink, m);
  return out;
}

// EncodeMsg of `m` with its last field holding `tail_bytes` bytes, without those bytes: the head a
// sender puts before the last field's own buffer (Channel::SendOwned(type, head, tail)), so a
// large field is not copied into a message first. Derived from M's own field list: `m` is
// encoded with that field empty (msgpack's empty string, one byte), whose byte is replaced by
// the string header of `tail_bytes`. REQUIRES: M's last field is a string, empty in `m`.
template <typename M>
std::string EncodeMsgHead(const M& m, size_t tail_bytes) {
  std::string out = EncodeMsg(m);
  out.pop_back();  // the empty last field: 0xa0
  StringSink sink{&out};
  msgpack::packer<StringSink>(sink).pack_str(static_cast<uint32_t>(tail_bytes));
  return out;
}

// For msgpack::unpack: strings and bins up to `*limit` bytes are referenced in the input, not
// copied into msgpack's zone first (the input outlives the object wherever this is used; a 16 MiB
// file's bytes would be copied twice otherwise). A longer one, and any ext, takes the copying
// path, whose unpack_limit check refuses it as before.
inline bool ReferenceUpTo(msgpack::type::object_type type, std::size_t length, void* limit) {
  return type != msgpack::type::EXT && length <= *static_cast<const size_t*>(limit);
}

template <typename M>
Status DecodeMsg(std::string_view in, M* m, const WireLimits& limits = kSandboxLimits) {
  try {
    msgpack::unpack_limit limit(limits.items, limits.map_pairs, limits.bytes, limits.bytes, 0, limits.depth);
    size_t off = 0;
    size_t bytes = limits.bytes;
    msgpack::object_handle oh = msgpack::unpack(in.data(), in.size(), off, &ReferenceUpTo, &bytes, limit);
    if (off != in.size()) return Status::Error("bad message: trailing bytes");
    oh.get().convert(*m);
  } catch (const std::exception& e) {
    return Status::Error(std::string("bad message: ") + e.what());
  }
  return Status::Ok();
}

}  // namespace sandpool
