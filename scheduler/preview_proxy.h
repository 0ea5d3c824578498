// Preview URLs of sessions' exposed ports (docs/design/network.md section 7.2): an HTTP reverse
// proxy in a process of its own, so that parsing requests from whoever reaches its port never
// happens in the daemon (root, holder of Redis credentials) and proxying a dev server's bundles
// never delays the daemon's loop.
//
//   http://<host>:<port>/<token>/path  ->  the session's 127.0.0.1:<exposed port>/path
//
// The process is forked by Start() while the daemon has no threads yet, binds nothing itself
// (the listening socket is bound by the daemon, as root, before the fork), and then drops to
// `uid` (its own host uid, past the slots' range: docs/SECURITY.md section 5) with no
// capabilities, no supplementary groups, no_new_privs, PDEATHSIG. It knows only the routes the
// daemon sends it over a socketpair (token -> sandbox address and port) and exits when that
// closes. A request whose first path segment is not a live token gets 404, the same for every
// unknown token; a known one is connected to the sandbox's address (where the slot's own nat
// rule, worker/netns_setup.h, hands it to 127.0.0.1, so servers bound to localhost work),
// its head rewritten (http_head.h), and then bytes are copied both ways until either side
// closes (WebSocket upgrades included). The daemon's table lets only this uid open connections
// into slots.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/fd.h"
#include "common/status.h"

namespace sandpool {

class PreviewProxy {
 public:
  // REQUIRES: root, and no threads in the calling process (it forks). `listen` is
  // "address:port" (port 0: the kernel picks; see port()).
  static Result<std::unique_ptr<PreviewProxy>> Start(const std::string& listen, uint32_t uid);
  PreviewProxy(const PreviewProxy&) = delete;
  PreviewProxy& operator=(const PreviewProxy&) = delete;
  ~PreviewProxy() { Stop(); }
  // Closes the channel and kills the process (the daemon reaps it). Idempotent.
  void Stop();

  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }

  // Routes, by token (26 characters of [a-z2-7], as NewPreviewToken makes). Fire and forget:
  // the process applies them in order; a route added is live before any request that arrives
  // after Add returned is read (the channel is read before new connections).
  void Add(const std::string& token, uint32_t addr, uint16_t port);
  void Remove(const std::string& token);

 private:
  PreviewProxy() = default;
  void Send(const std::string& message);

  UniqueFd channel_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

// 128 bits from getrandom, base32 lower case without padding (26 characters).
std::string NewPreviewToken();

}  // namespace sandpool
