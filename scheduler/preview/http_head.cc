#include "scheduler/preview/http_head.h"

#include <algorithm>
#include <cctype>

namespace sandpool {
namespace {

bool IsTchar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool EqualNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool HasToken(std::string_view list, std::string_view token) {
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string_view::npos) comma = list.size();
    if (EqualNoCase(Trim(list.substr(start, comma - start)), token)) return true;
    start = comma + 1;
  }
  return false;
}

}  // namespace

const std::string* HttpHead::Find(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (EqualNoCase(k, name)) return &v;
  }
  return nullptr;
}

Result<HttpHead> ParseHttpHead(std::string_view head) {
  if (head.size() > kMaxHttpHeadBytes) return Status::Error("request head too large");
  if (head.size() < 4 || head.substr(head.size() - 4) != "\r\n\r\n") return Status::Error("request head not complete");
  HttpHead h;
  size_t eol = head.find("\r\n");
  std::string_view line = head.substr(0, eol);
  size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp1 == sp2) return Status::Error("bad request line");
  h.method = std::string(line.substr(0, sp1));
  h.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  h.version = std::string(line.substr(sp2 + 1));
  if (h.method.empty() || !std::all_of(h.method.begin(), h.method.end(), IsTchar)) return Status::Error("bad method");
  if (h.target.empty() || h.target[0] != '/' ||
      std::any_of(h.target.begin(), h.target.end(), [](char c) { return static_cast<unsigned char>(c) <= ' ' || c == 0x7f; })) {
    return Status::Error("bad target");
  }
  if (h.version != "HTTP/1.1" && h.version != "HTTP/1.0") return Status::Error("not HTTP/1.x");
  size_t pos = eol + 2;
  while (pos < head.size() - 2) {
    size_t end = head.find("\r\n", pos);
    std::string_view l = head.substr(pos, end - pos);
    pos = end + 2;
    if (l.empty()) break;
    if (h.headers.size() >= 100) return Status::Error("too many headers");
    size_t colon = l.find(':');
    if (colon == 0 || colon == std::string_view::npos) return Status::Error("bad header line");
    std::string_view name = l.substr(0, colon), value = Trim(l.substr(colon + 1));
    if (!std::all_of(name.begin(), name.end(), IsTchar)) return Status::Error("bad header name");
    if (std::any_of(value.begin(), value.end(), [](char c) { return c == '\r' || c == '\n' || c == 0; })) {
      return Status::Error("bad header value");
    }
    h.headers.emplace_back(std::string(name), std::string(value));
  }
  int hosts = 0;
  for (const auto& [k, v] : h.headers) hosts += EqualNoCase(k, "host");
  if (hosts > 1) return Status::Error("more than one Host");
  if (h.Find("content-length") && h.Find("transfer-encoding")) return Status::Error("Content-Length with Transfer-Encoding");
  return h;
}

std::optional<std::pair<std::string, std::string>> SplitPreviewTarget(std::string_view target) {
  if (target.empty() || target[0] != '/') return std::nullopt;
  size_t end = target.find_first_of("/?", 1);
  if (end == std::string_view::npos) end = target.size();
  std::string_view token = target.substr(1, end - 1);
  if (token.empty() || token.size() > 64 ||
      !std::all_of(token.begin(), token.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); })) {
    return std::nullopt;
  }
  std::string rest(target.substr(end));
  if (rest.empty() || rest[0] == '?') rest.insert(rest.begin(), '/');
  return std::make_pair(std::string(token), rest);
}

std::string RewriteHttpHead(const HttpHead& head, std::string_view target, uint16_t port, std::string_view client_ip,
                            std::string_view prefix) {
  const std::string* connection = head.Find("connection");
  const std::string* upgrade = head.Find("upgrade");
  bool upgrading = upgrade && connection && HasToken(*connection, "upgrade");
  std::string out = head.method + " " + std::string(target) + " " + head.version + "\r\n";
  out += "Host: localhost:" + std::to_string(port) + "\r\n";
  static constexpr std::string_view kDropped[] = {"host", "connection", "keep-alive", "proxy-connection", "te", "trailer",
                                                  "upgrade", "forwarded", "x-forwarded-for", "x-forwarded-host",
                                                  "x-forwarded-proto", "x-forwarded-prefix", "proxy-authorization"};
  for (const auto& header : head.headers) {
    const std::string& name = header.first;
    if (std::any_of(std::begin(kDropped), std::end(kDropped), [&](std::string_view d) { return EqualNoCase(name, d); })) continue;
    out += name + ": " + header.second + "\r\n";
  }
  if (const std::string* host = head.Find("host")) out += "X-Forwarded-Host: " + *host + "\r\n";
  out += "X-Forwarded-For: " + std::string(client_ip) + "\r\nX-Forwarded-Proto: http\r\n";
  out += "X-Forwarded-Prefix: " + std::string(prefix) + "\r\n";
  if (upgrading) out += "Connection: Upgrade\r\nUpgrade: " + *upgrade + "\r\n";
  else out += "Connection: close\r\n";
  return out + "\r\n";
}

}  // namespace sandpool
