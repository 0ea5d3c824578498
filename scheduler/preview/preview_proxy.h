// Preview URLs of sessions' exposed ports (docs/design/network.md section 7.2), the daemon's side:
// starts the preview proxy's process and sends it routes. The proxy itself (preview_server.h) is
// a binary of its own, sandpool-preview-proxy (preview_proxy_main.cc), so that parsing requests
// from whoever reaches its port never happens in the daemon (root, holder of Redis credentials)
// nor in a copy of the daemon's memory, and proxying a dev server's bundles never delays the
// daemon's loop.
//
// Start() binds the listening socket (as root), opens the binary (next to the running sandpoold,
// or ../lib/sandpool/, as worker/runners/nursery.h finds its library) and forks while the daemon has no
// threads yet; the child execs that open file (execveat, no path looked up then) with an empty
// environment and nothing but stdio (0 and 1 on /dev/null, 2 the daemon's log), the listening
// socket and its end of a SOCK_SEQPACKET channel. The process drops to `uid` (its own host uid,
// past the slots' range: docs/SECURITY.md section 5), no capabilities, no supplementary groups,
// no_new_privs, PDEATHSIG, and a seccomp filter of its own, then says "ready"; Start waits for
// that. It exits when the channel closes. The daemon's table lets only this uid open
// connections into slots.
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
  // after Add returned is read (the channel is read before new connections). Remove also ends
  // every connection the route carries (upgraded and long ones included).
  void Add(const std::string& token, uint32_t addr, uint16_t port);
  void Remove(const std::string& token);

 private:
  PreviewProxy() = default;
  void Send(const std::string& message);

  UniqueFd channel_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

// The sandpool-preview-proxy binary next to the running program or in ../lib/sandpool/, opened
// O_RDONLY | O_CLOEXEC; invalid if neither exists.
UniqueFd OpenPreviewProxyBinary();

// 128 bits from getrandom, base32 lower case without padding (26 characters).
std::string NewPreviewToken();

}  // namespace sandpool
