// Sessions' exposed ports (PROTOCOL.md section 15, "Ports"; docs/design/network.md section 7):
// which port of which session has which preview token, and the routes the preview proxy
// (preview_proxy.h) holds for them. Everything of a session goes when it stops.
//
// On the daemon's loop; owned by the Daemon, used by Sessions.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/net/net_firewall.h"
#include "scheduler/preview/preview_proxy.h"

namespace sandpool {

class PortExposure {
 public:
  static constexpr size_t kMaxPerSession = 16;

  // `url_base`: what a token is appended to ("http://host:8480/"), ending in '/'. Host ports
  // come from [host_port_lo, host_port_hi] (0: none), mapped through `firewall` (SetFirewall:
  // the table is loaded after the proxy starts).
  PortExposure(PreviewProxy* proxy, std::string url_base, uint16_t host_port_lo, uint16_t host_port_hi)
      : proxy_(proxy), url_base_(std::move(url_base)), host_port_lo_(host_port_lo), host_port_hi_(host_port_hi) {}
  void SetFirewall(NetFirewall* firewall) { firewall_ = firewall; }

  struct Port {
    uint16_t port = 0;
    uint16_t host_port = 0;  // 0: none (no range, or none free)
    std::string token, url;
    int64_t created_ms = 0;
  };
  // The session's exposure of `port` at `sandbox_addr` (host byte order): the existing one if
  // the port is already exposed (same token), else a new one, with a host port when one is
  // free. Error: more than kMaxPerSession.
  Result<Port> Expose(const std::string& session, uint32_t sandbox_addr, uint16_t port);
  void Unexpose(const std::string& session, uint16_t port);
  std::vector<Port> List(const std::string& session) const;
  void Clear(const std::string& session);

  // msgpack values of the operations: one exposure, and {ports: [...]}.
  static std::string Encode(const Port& p);
  static std::string EncodeList(const std::vector<Port>& ports);

 private:
  void Release(const Port& p);

  PreviewProxy* proxy_;
  std::string url_base_;
  uint16_t host_port_lo_, host_port_hi_;
  NetFirewall* firewall_ = nullptr;
  std::set<uint16_t> host_ports_;  // in use
  std::map<std::string, std::map<uint16_t, Port>> sessions_;
};

}  // namespace sandpool
