#include "queue/redis_url.h"

#include <charconv>
#include <limits>

namespace sandpool {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX decoding for the userinfo part, so that passwords may contain ':', '@' or '/'.
Result<std::string> PercentDecode(std::string_view s, std::string_view what) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) {
      return Status::Error(std::string(what) + ": truncated %-escape");
    }
    int hi = HexValue(s[i + 1]), lo = HexValue(s[i + 2]);
    if (hi < 0 || lo < 0) return Status::Error(std::string(what) + ": invalid %-escape");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

// A decimal integer in [min, max], all of `s`.
bool ParseInt(std::string_view s, int min, int max, int* out) {
  if (s.empty()) return false;
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < min || v > max) return false;
  *out = v;
  return true;
}

Status ParseDb(std::string_view s, RedisUrl* url) {
  if (!ParseInt(s, 0, std::numeric_limits<int>::max(), &url->db)) {
    return Status::Error("invalid database number '" + std::string(s) + "'");
  }
  return Status::Ok();
}

Result<RedisUrl> ParseTcp(std::string_view rest) {
  RedisUrl url;
  // rest = [userinfo@]hostport[/db]. The userinfo ends at the last '@' so that an unescaped '@'
  // in a password still works.
  size_t slash = rest.find('/', rest.rfind('@') == std::string_view::npos ? 0 : rest.rfind('@'));
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
  size_t at = authority.rfind('@');
  if (at != std::string_view::npos) {
    std::string_view userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    size_t colon = userinfo.find(':');
    std::string_view user = userinfo.substr(0, colon);
    std::string_view pass = colon == std::string_view::npos ? "" : userinfo.substr(colon + 1);
    if (colon == std::string_view::npos) {
      // "redis://secret@host": a lone userinfo is the password (what redis-cli -u does).
      pass = user;
      user = "";
    }
    auto u = PercentDecode(user, "user");
    if (!u.ok()) return u.status();
    auto p = PercentDecode(pass, "password");
    if (!p.ok()) return p.status();
    url.user = std::move(u).value();
    url.password = std::move(p).value();
  }
  std::string_view port_text;
  if (!authority.empty() && authority[0] == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return Status::Error("missing ']' after IPv6 address");
    url.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return Status::Error("unexpected text after ']'");
      port_text = after.substr(1);
      if (port_text.empty()) return Status::Error("empty port");
    }
  } else {
    size_t colon = authority.rfind(':');
    url.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) return Status::Error("empty port");
    }
    if (url.host.find(':') != std::string::npos) {
      return Status::Error("IPv6 addresses must be in brackets, e.g. redis://[::1]:6379");
    }
  }
  if (url.host.empty()) return Status::Error("missing host");
  if (!port_text.empty() && !ParseInt(port_text, 1, 65535, &url.port)) {
    return Status::Error("invalid port '" + std::string(port_text) + "'");
  }
  if (!path.empty()) SP_RETURN_IF_ERROR(ParseDb(path, &url));
  return url;
}

Result<RedisUrl> ParseUnix(std::string_view rest) {
  RedisUrl url;
  size_t q = rest.find('?');
  std::string_view path = rest.substr(0, q);
  if (path.empty() || path[0] != '/') {
    return Status::Error("unix socket path must be absolute (unix:///path/to/redis.sock)");
  }
  url.unix_path = std::string(path);
  url.port = 0;
  if (q != std::string_view::npos) {
    std::string_view query = rest.substr(q + 1);
    while (!query.empty()) {
      size_t amp = query.find('&');
      std::string_view param = query.substr(0, amp);
      query = amp == std::string_view::npos ? "" : query.substr(amp + 1);
      size_t eq = param.find('=');
      std::string_view key = param.substr(0, eq);
      std::string_view value = eq == std::string_view::npos ? "" : param.substr(eq + 1);
      if (key == "db") {
        SP_RETURN_IF_ERROR(ParseDb(value, &url));
      } else if (key == "password") {
        auto p = PercentDecode(value, "password");
        if (!p.ok()) return p.status();
        url.password = std::move(p).value();
      } else if (key == "user") {
        auto u = PercentDecode(value, "user");
        if (!u.ok()) return u.status();
        url.user = std::move(u).value();
      } else {
        return Status::Error("unknown parameter '" + std::string(key) + "' (known: db, user, password)");
      }
    }
  }
  return url;
}

}  // namespace

std::string RedisUrl::Redacted() const {
  std::string out;
  if (!unix_path.empty()) {
    out = "unix://" + unix_path;
    char sep = '?';
    if (db != 0) {
      out += sep + std::string("db=") + std::to_string(db);
      sep = '&';
    }
    if (!user.empty()) {
      out += sep + std::string("user=") + user;
      sep = '&';
    }
    if (!password.empty()) out += sep + std::string("password=***");
    return out;
  }
  out = "redis://";
  if (!user.empty() || !password.empty()) {
    out += user;
    if (!password.empty()) out += ":***";
    out += '@';
  }
  if (host.find(':') != std::string::npos) {
    out += '[' + host + ']';
  } else {
    out += host;
  }
  out += ':' + std::to_string(port);
  if (db != 0) out += '/' + std::to_string(db);
  return out;
}

Result<RedisUrl> ParseRedisUrl(std::string_view text) {
  constexpr std::string_view kRedis = "redis://";
  constexpr std::string_view kUnix = "unix://";
  Result<RedisUrl> r = Status::Error("");
  if (text.starts_with(kRedis)) {
    r = ParseTcp(text.substr(kRedis.size()));
  } else if (text.starts_with(kUnix)) {
    r = ParseUnix(text.substr(kUnix.size()));
  } else {
    return Status::Error("invalid Redis URL: want redis://[user:password@]host:port[/db] or "
                         "unix:///path[?db=N]");
  }
  if (!r.ok()) {
    // Never echo the URL itself: it may hold a password.
    return r.status().Prefixed("invalid Redis URL");
  }
  return r;
}

}  // namespace sandpool
