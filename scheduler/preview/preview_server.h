// The preview proxy's server (docs/design/network.md section 7.2): the event loop of the
// `sandpool-preview-proxy` process (preview_proxy_main.cc), which the daemon starts through
// preview_proxy.h. Nothing of the daemon is in that process: it is exec'd with only its
// listening socket and its channel.
//
//   http://<host>:<port>/<token>/path  ->  the session's 127.0.0.1:<exposed port>/path
//
// It knows only the routes the daemon sends over the channel (one datagram each):
//   "add <token> <addr> <port>"   token -> sandbox address (host byte order, decimal) and port
//   "remove <token>"              the route goes, and with it every connection it carries
//                                 (spliced and upgraded ones too: an unexposed port is closed)
// A request whose first path segment is not a live token gets 404, the same for every unknown
// token. Tokens are found by a keyed hash of the token (a secret key of this process's), then
// compared in constant time with the route's token, so no timing tells how much of a guess was
// right. A known one is connected to the sandbox's address (where the slot's nat rule,
// worker/sandbox/netns_setup.h, hands it to 127.0.0.1), its head rewritten (http_head.h), and then bytes
// are copied both ways until either side closes (WebSocket upgrades included).
#pragma once

#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace sandpool {

// Serves `listen_fd` (a listening TCP socket) until `channel_fd` (SOCK_SEQPACKET, the daemon's
// end) closes. `before_serving` runs once the loop is set up, before the first event: the
// process's seccomp filter goes on there (preview_proxy_main.cc), after everything that needs
// more than the serving calls. Single-threaded.
Status RunPreviewServer(int listen_fd, int channel_fd, Status (*before_serving)());

// Whether `a` equals `b`, in a time that depends on their lengths only.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace sandpool
