// DNS packets for the network templates' resolver (scheduler/net/dns_proxy.h; docs/design/network.md
// section 4): what a sandbox asked, and the reply it gets. Pure code over ldns (Debian's libldns):
// no sockets, no clock, no policy of its own (the caller passes it in). Every packet here comes
// from a sandbox or from upstream and is untrusted: ldns parses it, nothing is parsed by hand,
// and tests/fuzz/dns_answer_fuzz.cc feeds it garbage.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace sandpool {

inline constexpr uint16_t kDnsTypeA = 1, kDnsTypeAAAA = 28, kDnsTypeSVCB = 64, kDnsTypeHTTPS = 65;
inline constexpr int kRcodeNoError = 0, kRcodeFormErr = 1, kRcodeServFail = 2, kRcodeNxDomain = 3,
                     kRcodeNotImp = 4, kRcodeRefused = 5;

struct DnsQuestion {
  uint16_t id = 0;
  std::string name;  // lower case, no trailing dot ("" for the root)
  uint16_t qtype = 0;
  uint16_t udp_size = 512;  // what the client can take over UDP (EDNS, at most 1232)
};

// A standard query with exactly one question of class IN. Anything else is an error whose
// message says why (the caller answers FORMERR or NOTIMP when the header was readable).
Result<DnsQuestion> ParseDnsQuery(std::span<const uint8_t> wire);

// A reply of our own to `query` (parsed again from its bytes): its id, question and letter case,
// RD copied, RA set, `rcode`, no records. REQUIRES: ParseDnsQuery(query) succeeded.
std::vector<uint8_t> LocalDnsReply(std::span<const uint8_t> query, int rcode);

struct OpenedAddress {
  uint32_t addr = 0;  // host byte order
  uint32_t ttl = 0;   // seconds, clamped
};

struct FilteredAnswer {
  int rcode = kRcodeServFail;
  std::vector<uint8_t> wire;          // the reply to send the sandbox
  std::vector<OpenedAddress> opened;  // its A records: open these before sending it
  size_t dropped = 0;                 // A records refused by `refused_address` (rebinding)
};

// The reply to `query` from an upstream answer (A question). Keeps only the CNAME chain that
// starts at the question's name (at most 8 links, each owner the previous target) and the A
// records of its last name; drops every other record and section. A records whose address
// `refused_address` says no to are dropped; if that leaves none of several, the reply is
// REFUSED (an allowed name pointing at a private or host address: rebinding). At most 16
// addresses are kept (each becomes a kernel set element). TTLs of the
// kept records are clamped to [ttl_min, ttl_max]. A reply that would not fit the client's UDP
// size is truncated (TC, no records) when `udp` is set. Upstream garbage: SERVFAIL.
FilteredAnswer FilterDnsAnswer(std::span<const uint8_t> query, std::span<const uint8_t> upstream,
                               const std::function<bool(uint32_t)>& refused_address, uint32_t ttl_min,
                               uint32_t ttl_max, bool udp);

}  // namespace sandpool
