// libFuzzer harness: the network templates' resolver's packet code (scheduler/net/dns_answer.h),
// which parses what sandboxes and upstream resolvers send, in the daemon (root). The input is a
// 2-byte length L, a query of L bytes, then an upstream answer. Properties, beyond "no crash,
// leak or UBSan report":
//  - a query that parses gets a local reply that is a response with its id;
//  - a filtered answer never opens an address the filter refuses, nor a TTL outside the clamp;
//  - a UDP reply never exceeds what the client can take, and a truncated one opens nothing.
#include <cstddef>
#include <cstdint>
#include <span>

#include "scheduler/net/dns_answer.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandpool;
  if (size < 2) return 0;
  size_t n = (size_t{data[0]} << 8) | data[1];
  if (n > size - 2) n = size - 2;
  std::span<const uint8_t> query(data + 2, n), upstream(data + 2 + n, size - 2 - n);
  auto q = ParseDnsQuery(query);
  if (!q.ok()) return 0;
  std::vector<uint8_t> local = LocalDnsReply(query, kRcodeNxDomain);
  FUZZ_CHECK(local.size() >= 12 && (local[2] & 0x80) && ((local[0] << 8) | local[1]) == q->id, "local replies answer the query");
  auto refused = [](uint32_t a) { return (a >> 24) == 10 || (a >> 24) == 127; };
  for (bool udp : {true, false}) {
    FilteredAnswer a = FilterDnsAnswer(query, upstream, refused, 5, 50, udp);
    FUZZ_CHECK(!a.wire.empty(), "every query gets a reply");
    for (const OpenedAddress& o : a.opened) {
      FUZZ_CHECK(!refused(o.addr), "refused addresses are never opened");
      FUZZ_CHECK(o.ttl >= 5 && o.ttl <= 50, "TTLs are clamped");
    }
    if (udp) FUZZ_CHECK(a.wire.size() <= q->udp_size || a.opened.empty(), "UDP replies fit or open nothing");
  }
  return 0;
}
