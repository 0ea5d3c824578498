// libFuzzer harness: ParseRedisUrl (queue/redis_url.h), which reads --redis and
// SANDPOOL_REDIS_URL in the daemon and every client. Properties, beyond "no crash, leak or UBSan
// report":
//  - an error message starts with "invalid Redis URL";
//  - an accepted URL is one address: a unix socket (absolute path, no host) or a host with a
//    port in 1..65535; the database is not negative;
//  - it round-trips: the canonical URL of what was parsed (user and password %-escaped, an
//    IPv6 host in brackets) parses to the same fields. Redacted() is called for coverage only:
//    it is for logs and escapes nothing.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "queue/redis_url.h"
#include "tests/fuzz/fuzz_check.h"

namespace sandpool {
namespace {

std::string Escape(std::string_view s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if ((u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z')) {
      out += c;
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

std::string Canonical(const RedisUrl& u) {
  if (!u.unix_path.empty()) {
    return "unix://" + u.unix_path + "?db=" + std::to_string(u.db) + "&user=" + Escape(u.user) +
           "&password=" + Escape(u.password);
  }
  std::string out = "redis://";
  if (!u.user.empty() || !u.password.empty()) out += Escape(u.user) + ":" + Escape(u.password) + "@";
  // Brackets for an IPv6 host, and for one that starts with '[' ("redis://[[x]" is host "[x").
  bool bracket = u.host.find(':') != std::string::npos || u.host[0] == '[';
  out += bracket ? "[" + u.host + "]" : u.host;
  return out + ":" + std::to_string(u.port) + "/" + std::to_string(u.db);
}

bool Same(const RedisUrl& a, const RedisUrl& b) {
  return a.host == b.host && a.port == b.port && a.unix_path == b.unix_path && a.user == b.user &&
         a.password == b.password && a.db == b.db;
}

}  // namespace
}  // namespace sandpool

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandpool;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<RedisUrl> url = ParseRedisUrl(text);
  if (!url.ok()) {
    FUZZ_CHECK(url.status().message().rfind("invalid Redis URL", 0) == 0,
               "errors start with 'invalid Redis URL'");
    return 0;
  }
  const RedisUrl& u = *url;
  if (!u.unix_path.empty()) {
    FUZZ_CHECK(u.unix_path[0] == '/' && u.host.empty(), "a unix URL: absolute path, no host");
  } else {
    FUZZ_CHECK(!u.host.empty() && u.port >= 1 && u.port <= 65535, "a TCP URL: host and port");
  }
  FUZZ_CHECK(u.db >= 0, "db is not negative");
  (void)u.Redacted();

  std::string canonical = Canonical(u);
  Result<RedisUrl> again = ParseRedisUrl(canonical);
  FUZZ_CHECK(again.ok(), "the canonical URL of a parsed URL parses");
  FUZZ_CHECK(Same(u, *again), "the canonical URL parses to the same fields");
  return 0;
}
