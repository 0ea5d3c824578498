// Forgetting a sandbox's flows (docs/design/network.md 3.3). A UDP flow stays "established" in
// conntrack for minutes after its last packet, and established flows pass the table before any
// policy check: a job whose policy is narrower than its slot's previous job's, or a slot number
// taken over by another template or session, must not inherit them. So before such a job runs
// (the daemon) and whenever a keeper makes a network slot's link (the keeper, in the host's
// namespace), every conntrack entry whose original source is the slot's
// sandbox address is deleted (libnetfilter-conntrack: a dump, then a delete of each match; never
// a filtered flush, which on this kernel deletes every entry: see bench/network-checks).
#pragma once

#include <cstdint>

#include "common/status.h"

namespace sandpool {

// REQUIRES: CAP_NET_ADMIN in the namespace of the table (the daemon's). Blocking; one dump of
// the conntrack table. `removed` (optional): how many entries went.
Status FlushConntrackFrom(uint32_t sandbox_addr, uint64_t* removed = nullptr);

}  // namespace sandpool
