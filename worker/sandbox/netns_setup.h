// A network slot's link (docs/design/network.md section 2): one point-to-point veth pair per
// slot, made by the slot's keeper while it sets itself up, before any sandbox exists.
//
//   host namespace                         the slot's namespace (the keeper's, shared by its sandboxes)
//   <prefix><slot>  base+2n/31  <------->  eth0  base+2n+1/31, default via base+2n
//
// The host end has no IPv6 address (address generation off before it is up); the slot's
// namespace has IPv6 disabled on every interface but lo, so nothing IPv6 ever leaves it. What
// the sandbox may reach is decided by the daemon's nftables table in the host namespace
// (scheduler/net/net_firewall.h), which exists before the first keeper of a network template
// starts. Sandbox root has no CAP_NET_ADMIN or CAP_NET_RAW in this namespace (it is owned by
// the initial user namespace), so nothing here can be changed from inside.
//
// Runs in the keeper: single-threaded, root in the initial user namespace, free to allocate.
// Uses libnl (route), which never enters the nursery library.
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "worker/sandbox/sandbox_config.h"

namespace sandpool {

// The slot's addresses, in host byte order: two per slot number from the pool's base.
inline uint32_t HostEndAddress(uint32_t pool_base, uint32_t slot) { return pool_base + 2 * slot; }
inline uint32_t SandboxAddress(uint32_t pool_base, uint32_t slot) { return pool_base + 2 * slot + 1; }
inline uint32_t HostEndAddress(const SlotNetwork& net, uint32_t slot) { return HostEndAddress(net.pool_base, slot); }
inline uint32_t SandboxAddress(const SlotNetwork& net, uint32_t slot) { return SandboxAddress(net.pool_base, slot); }

// Moves the calling process into a network namespace of its own, with only lo, up: every
// keeper's, when it sets itself up, and a session keeper's again after each session, so that
// the next session it serves finds nothing the last one left (sockets in TIME_WAIT, ...).
Status EnterNewNetworkNamespace();

// Opened in the host namespace before the keeper leaves it; used afterwards to configure the
// host end. Move-only.
class HostNetlink {
 public:
  static Result<HostNetlink> Open();
  HostNetlink(HostNetlink&&) noexcept;
  HostNetlink& operator=(HostNetlink&&) noexcept;
  ~HostNetlink();

  // REQUIRES: the calling process has just entered its new network namespace (unshare
  // CLONE_NEWNET, lo up). Makes the pair, moves the peer into the host namespace, addresses
  // and brings up both ends, and sets the slot's default route. A host end of the same name
  // left by an earlier keeper of this slot (its namespace not yet torn down) is deleted first.
  Status ConnectSlot(const SlotNetwork& net, uint32_t slot);

 private:
  struct Impl;
  explicit HostNetlink(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sandpool
