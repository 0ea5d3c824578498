// Reading msgpack that comes from anywhere (clients, Redis, a sandbox): exactly one object per
// buffer, every size and the depth bounded before anything is allocated, every exception caught,
// values read only through their type tags. Shared by every decoder in queue/ (jobs, results,
// events, session requests); strings and bins stay referenced in the caller's buffer, which must
// outlive the parsed object.
#pragma once

#include <msgpack.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "queue/protocol.h"

namespace sandpool::mpk {

// Depth: job = map > argv/env (2); event = map > result > error (3); a session request's value
// maps one more. Anything deeper is invalid, and a small bound keeps the parser's stack small.
inline constexpr size_t kMaxDepth = 6;

enum class ParseFail { kNone, kMalformed, kTrailing, kTooLarge, kTooDeep, kExt, kNoMemory };

struct Parsed {
  msgpack::object_handle handle;
  ParseFail fail = ParseFail::kNone;
  std::string detail;
};

// Unpacks exactly one object spanning all of `bytes`. Never throws.
Parsed ParseOne(std::string_view bytes, const msgpack::unpack_limit& limit);
// The bounds for maps daemons write (results, events): generous, but bounded.
msgpack::unpack_limit TolerantLimit();

inline bool IsStr(const msgpack::object& o) { return o.type == msgpack::type::STR; }
inline bool IsBytes(const msgpack::object& o) { return o.type == msgpack::type::STR || o.type == msgpack::type::BIN; }
inline bool IsUint(const msgpack::object& o) { return o.type == msgpack::type::POSITIVE_INTEGER; }
inline std::string_view StrOf(const msgpack::object& o) { return std::string_view(o.via.str.ptr, o.via.str.size); }
inline std::string_view BytesOf(const msgpack::object& o) {
  return o.type == msgpack::type::BIN ? std::string_view(o.via.bin.ptr, o.via.bin.size) : StrOf(o);
}

// Strict UTF-8 (no overlongs, no surrogates, at most U+10FFFF).
bool ValidUtf8(std::string_view s);
// Why a text field is unacceptable (contains NUL, not UTF-8), or nullptr.
const char* BadText(std::string_view s);
// A name or value for an error message: at most 64 printable bytes, quoted.
std::string Quote(std::string_view s);

// Typed reads: false when the object has another type (or is out of range).
bool GetU64(const msgpack::object& o, uint64_t* out);
bool GetU32(const msgpack::object& o, uint32_t* out);
bool GetBool(const msgpack::object& o, bool* out);
bool GetOptInt(const msgpack::object& o, std::optional<int>* out);
bool GetStr(const msgpack::object& o, std::string* out);
bool GetBytes(const msgpack::object& o, std::string* out);

}  // namespace sandpool::mpk
