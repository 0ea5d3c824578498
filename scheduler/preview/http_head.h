// The head of an HTTP/1.x request, as the preview proxy (scheduler/preview/preview_proxy.h) reads it from
// anyone who can reach its port: parsed strictly, then rewritten for the sandbox's server. Pure
// code; fuzzed (tests/fuzz/http_head_fuzz.cc). Strict means: CRLF line ends only, no obs-fold,
// token characters in the method and header names, one Host, no Content-Length together with
// Transfer-Encoding (request smuggling), at most 100 header lines; anything else is an error.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace sandpool {

inline constexpr size_t kMaxHttpHeadBytes = 16 * 1024;

struct HttpHead {
  std::string method, target, version;  // version: "HTTP/1.0" or "HTTP/1.1"
  std::vector<std::pair<std::string, std::string>> headers;  // names as sent, values trimmed
  const std::string* Find(std::string_view name) const;      // case-insensitive; first match
};

// `head` is everything up to and including the blank line ("\r\n\r\n").
Result<HttpHead> ParseHttpHead(std::string_view head);

// "/<token>/rest?q" -> {token, "/rest?q"}; "/<token>" and "/<token>?q" -> {token, "/" or "/?q"}.
// nullopt when the target does not start with a segment of 1..64 [a-z0-9] characters.
std::optional<std::pair<std::string, std::string>> SplitPreviewTarget(std::string_view target);

// The head sent to the sandbox's server: `target` in place of the original, Host
// "localhost:<port>" (dev servers check it), hop-by-hop and client-sent X-Forwarded-* and
// Forwarded headers dropped, X-Forwarded-For/-Host/-Proto/-Prefix set, and "Connection: close"
// unless the request asks for an Upgrade (WebSocket), which is passed on.
std::string RewriteHttpHead(const HttpHead& head, std::string_view target, uint16_t port, std::string_view client_ip,
                            std::string_view prefix);

}  // namespace sandpool
