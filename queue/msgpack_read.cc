#include "queue/msgpack_read.h"

#include <exception>
#include <limits>
#include <new>

namespace sandpool::mpk {
// ---------------------------------------------------------------------------------------------
// Decoding helpers. Strings and bins are referenced in the caller's buffer instead of copied
// into the zone: the buffer outlives the object, and it halves the memory a hostile payload can
// make us use.

namespace {

bool ReferenceAll(msgpack::type::object_type, std::size_t, void*) { return true; }




}  // namespace

Parsed ParseOne(std::string_view bytes, const msgpack::unpack_limit& limit) {
  Parsed p;
  try {
    size_t off = 0;
    p.handle = msgpack::unpack(bytes.data(), bytes.size(), off, &ReferenceAll, nullptr, limit);
    if (off != bytes.size()) {
      p.fail = ParseFail::kTrailing;
      p.detail = std::to_string(bytes.size() - off) + " trailing bytes after the map";
    }
  } catch (const msgpack::ext_size_overflow&) {
    p.fail = ParseFail::kExt;
    p.detail = "ext value too large or not allowed";
  } catch (const msgpack::depth_size_overflow&) {
    p.fail = ParseFail::kTooDeep;
    p.detail = "nesting too deep";
  } catch (const msgpack::size_overflow& e) {
    p.fail = ParseFail::kTooLarge;
    p.detail = e.what();
  } catch (const msgpack::insufficient_bytes&) {
    p.fail = ParseFail::kMalformed;
    p.detail = "truncated msgpack";
  } catch (const std::bad_alloc&) {
    p.fail = ParseFail::kNoMemory;
    p.detail = "out of memory";
  } catch (const std::exception& e) {
    p.fail = ParseFail::kMalformed;
    p.detail = std::string("not msgpack: ") + e.what();
  } catch (...) {
    p.fail = ParseFail::kMalformed;
    p.detail = "not msgpack";
  }
  return p;
}



bool HasNul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

// Strict UTF-8 (no overlongs, no surrogates, at most U+10FFFF). Text fields must be valid: the
// interpreters of code templates receive them as text, and the same job must behave the same
// in every template.
bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t extra;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      extra = 1;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      extra = 2;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i <= extra) return false;
    for (size_t k = 1; k <= extra; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if ((extra == 2 && cp < 0x800) || (extra == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

// Why a text field is unacceptable, or nullptr.
const char* BadText(std::string_view s) {
  if (HasNul(s)) return "contains NUL";
  if (!ValidUtf8(s)) return "is not valid UTF-8";
  return nullptr;
}

// Field names and values go into error messages; keep them short and printable.
std::string Quote(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 64)) {
    auto u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7f) ? c : '?';
  }
  if (s.size() > 64) out += "...";
  out += "'";
  return out;
}

msgpack::unpack_limit TolerantLimit() {
  constexpr size_t kMaxStr = 64u << 20;  // above any output cap a daemon may be given
  return msgpack::unpack_limit(/*array=*/1 << 16, /*map=*/1 << 12, kMaxStr, kMaxStr,
                               /*ext=*/1 << 16, kMaxDepth);
}

bool GetU64(const msgpack::object& o, uint64_t* out) {
  if (!IsUint(o)) return false;
  *out = o.via.u64;
  return true;
}

bool GetU32(const msgpack::object& o, uint32_t* out) {
  if (!IsUint(o) || o.via.u64 > std::numeric_limits<uint32_t>::max()) return false;
  *out = static_cast<uint32_t>(o.via.u64);
  return true;
}

bool GetBool(const msgpack::object& o, bool* out) {
  if (o.type != msgpack::type::BOOLEAN) return false;
  *out = o.via.boolean;
  return true;
}

bool GetOptInt(const msgpack::object& o, std::optional<int>* out) {
  if (o.type == msgpack::type::NIL) {
    out->reset();
    return true;
  }
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<uint64_t>(std::numeric_limits<int>::max())) return false;
    *out = static_cast<int>(o.via.u64);
    return true;
  }
  if (o.type == msgpack::type::NEGATIVE_INTEGER) {
    if (o.via.i64 < std::numeric_limits<int>::min()) return false;
    *out = static_cast<int>(o.via.i64);
    return true;
  }
  return false;
}

bool GetStr(const msgpack::object& o, std::string* out) {
  if (!IsStr(o)) return false;
  *out = std::string(StrOf(o));
  return true;
}

bool GetBytes(const msgpack::object& o, std::string* out) {
  if (!IsBytes(o)) return false;
  *out = std::string(BytesOf(o));
  return true;
}

}  // namespace sandpool::mpk
