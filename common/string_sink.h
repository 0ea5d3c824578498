// StringSink: a msgpack stream (anything with write(const char*, size_t) serves msgpack::packer)
// that packs into a std::string. msgpack's own sbuffer would take one more copy of every byte to
// become the string a message travels in, and a session's file travels in those (up to 32 MiB
// through the daemon). A large write (a file's bytes) leaves room behind it, so that the few bytes
// a message may pack after it do not move it again.
//
// Not owning: `out` must outlive the sink and not be moved while a packer writes through it.
#pragma once

#include <cstddef>
#include <string>

namespace sandpool {

struct StringSink {
  std::string* out;
  void write(const char* p, size_t n) {
    if (n >= (64u << 10) && out->capacity() - out->size() < n) out->reserve(out->size() + n + 4096);
    out->append(p, n);
  }
};

}  // namespace sandpool
