#include "scheduler/net/dns_answer.h"

#include <ldns/ldns.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>

namespace sandpool {
namespace {

constexpr uint16_t kMaxUdpSize = 1232;  // the DNS flag day's safe EDNS size
constexpr int kMaxChain = 8;
constexpr size_t kMaxAddresses = 16;  // per answer: each one is a set element in the kernel

struct PktFree {
  void operator()(ldns_pkt* p) const { ldns_pkt_free(p); }
};
using Pkt = std::unique_ptr<ldns_pkt, PktFree>;

Pkt Parse(std::span<const uint8_t> wire) {
  ldns_pkt* p = nullptr;
  if (wire.size() < LDNS_HEADER_SIZE || ldns_wire2pkt(&p, wire.data(), wire.size()) != LDNS_STATUS_OK) return nullptr;
  return Pkt(p);
}

std::string DnameText(const ldns_rdf* d) {
  char* s = ldns_rdf2str(d);
  std::string out = s ? s : "";
  std::free(s);
  if (!out.empty() && out.back() == '.') out.pop_back();
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A reply skeleton for `q`: id, question, RD copied, RA, EDNS echoed (capped).
Pkt Skeleton(const ldns_pkt* q, int rcode) {
  Pkt r(ldns_pkt_new());
  ldns_pkt_set_id(r.get(), ldns_pkt_id(q));
  ldns_pkt_set_qr(r.get(), true);
  ldns_pkt_set_opcode(r.get(), LDNS_PACKET_QUERY);
  ldns_pkt_set_rd(r.get(), ldns_pkt_rd(q));
  ldns_pkt_set_ra(r.get(), true);
  ldns_pkt_set_rcode(r.get(), static_cast<uint8_t>(rcode));
  ldns_rr_list* qs = ldns_pkt_question(q);
  if (qs && ldns_rr_list_rr_count(qs) == 1) {
    ldns_pkt_push_rr(r.get(), LDNS_SECTION_QUESTION, ldns_rr_clone(ldns_rr_list_rr(qs, 0)));
  }
  if (ldns_pkt_edns(q)) ldns_pkt_set_edns_udp_size(r.get(), std::min<uint16_t>(kMaxUdpSize, std::max<uint16_t>(512, ldns_pkt_edns_udp_size(q))));
  return r;
}

std::vector<uint8_t> Wire(const ldns_pkt* p) {
  uint8_t* buf = nullptr;
  size_t n = 0;
  if (ldns_pkt2wire(&buf, p, &n) != LDNS_STATUS_OK) return {};
  std::vector<uint8_t> out(buf, buf + n);
  std::free(buf);
  return out;
}

uint16_t UdpSize(const ldns_pkt* q) {
  if (!ldns_pkt_edns(q)) return 512;
  return std::min<uint16_t>(kMaxUdpSize, std::max<uint16_t>(512, ldns_pkt_edns_udp_size(q)));
}

}  // namespace

Result<DnsQuestion> ParseDnsQuery(std::span<const uint8_t> wire) {
  Pkt q = Parse(wire);
  if (!q) return Status::Error("not a DNS message");
  if (ldns_pkt_qr(q.get())) return Status::Error("a response, not a query");
  if (ldns_pkt_get_opcode(q.get()) != LDNS_PACKET_QUERY) return Status::Error("opcode is not QUERY");
  ldns_rr_list* qs = ldns_pkt_question(q.get());
  if (qs == nullptr || ldns_rr_list_rr_count(qs) != 1) return Status::Error("not exactly one question");
  const ldns_rr* rr = ldns_rr_list_rr(qs, 0);
  if (ldns_rr_get_class(rr) != LDNS_RR_CLASS_IN) return Status::Error("class is not IN");
  DnsQuestion out;
  out.id = ldns_pkt_id(q.get());
  out.name = DnameText(ldns_rr_owner(rr));
  out.qtype = static_cast<uint16_t>(ldns_rr_get_type(rr));
  out.udp_size = UdpSize(q.get());
  return out;
}

std::vector<uint8_t> LocalDnsReply(std::span<const uint8_t> query, int rcode) {
  Pkt q = Parse(query);
  if (!q) return {};
  Pkt r = Skeleton(q.get(), rcode);
  return Wire(r.get());
}

FilteredAnswer FilterDnsAnswer(std::span<const uint8_t> query, std::span<const uint8_t> upstream,
                               const std::function<bool(uint32_t)>& refused_address, uint32_t ttl_min,
                               uint32_t ttl_max, bool udp) {
  FilteredAnswer out;
  Pkt q = Parse(query);
  if (!q) return out;
  Pkt up = Parse(upstream);
  ldns_rr_list* qs = ldns_pkt_question(q.get());
  if (!up || !ldns_pkt_qr(up.get()) || qs == nullptr || ldns_rr_list_rr_count(qs) != 1) {
    out.wire = LocalDnsReply(query, kRcodeServFail);
    return out;
  }
  int rcode = ldns_pkt_get_rcode(up.get());
  if (rcode != kRcodeNoError && rcode != kRcodeNxDomain) rcode = kRcodeServFail;
  Pkt r = Skeleton(q.get(), rcode);
  auto clamp = [&](uint32_t ttl) { return std::clamp(ttl, ttl_min, ttl_max); };

  // Follow the chain from the question's name through the answer section.
  ldns_rr_list* answers = ldns_pkt_answer(up.get());
  size_t n = answers ? ldns_rr_list_rr_count(answers) : 0;
  const ldns_rdf* current = ldns_rr_owner(ldns_rr_list_rr(qs, 0));
  std::vector<ldns_rr*> chain, a_records;
  for (int link = 0; link <= kMaxChain; ++link) {
    const ldns_rr* cname = nullptr;
    for (size_t i = 0; i < n; ++i) {
      const ldns_rr* rr = ldns_rr_list_rr(answers, i);
      if (ldns_rr_get_class(rr) != LDNS_RR_CLASS_IN || ldns_dname_compare(ldns_rr_owner(rr), current) != 0) continue;
      if (ldns_rr_get_type(rr) == LDNS_RR_TYPE_CNAME && ldns_rr_rd_count(rr) == 1 && cname == nullptr) cname = rr;
    }
    if (cname == nullptr || link == kMaxChain) break;
    chain.push_back(ldns_rr_clone(cname));
    current = ldns_rr_rdf(cname, 0);
  }
  for (size_t i = 0; i < n; ++i) {
    const ldns_rr* rr = ldns_rr_list_rr(answers, i);
    if (ldns_rr_get_type(rr) != LDNS_RR_TYPE_A || ldns_rr_get_class(rr) != LDNS_RR_CLASS_IN ||
        ldns_dname_compare(ldns_rr_owner(rr), current) != 0 || ldns_rr_rd_count(rr) != 1) {
      continue;
    }
    const ldns_rdf* d = ldns_rr_rdf(rr, 0);
    if (ldns_rdf_get_type(d) != LDNS_RDF_TYPE_A || ldns_rdf_size(d) != 4) continue;
    const uint8_t* b = ldns_rdf_data(d);
    uint32_t addr = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    if (refused_address(addr)) {
      ++out.dropped;
      continue;
    }
    if (a_records.size() >= kMaxAddresses) continue;
    ldns_rr* kept = ldns_rr_clone(rr);
    ldns_rr_set_ttl(kept, clamp(ldns_rr_ttl(rr)));
    out.opened.push_back({addr, ldns_rr_ttl(kept)});
    a_records.push_back(kept);
  }
  if (out.dropped > 0 && a_records.empty()) {
    for (ldns_rr* rr : chain) ldns_rr_free(rr);
    out.rcode = kRcodeRefused;
    out.wire = LocalDnsReply(query, kRcodeRefused);
    return out;
  }
  for (ldns_rr* rr : chain) {
    ldns_rr_set_ttl(rr, clamp(ldns_rr_ttl(rr)));
    ldns_pkt_push_rr(r.get(), LDNS_SECTION_ANSWER, rr);  // the packet owns it now
  }
  for (ldns_rr* rr : a_records) ldns_pkt_push_rr(r.get(), LDNS_SECTION_ANSWER, rr);
  out.rcode = rcode;
  out.wire = Wire(r.get());
  if (udp && out.wire.size() > UdpSize(q.get())) {
    // Too big for the client's datagram: it asks again over TCP. Nothing is opened for it yet.
    Pkt tc = Skeleton(q.get(), rcode);
    ldns_pkt_set_tc(tc.get(), true);
    out.wire = Wire(tc.get());
    out.opened.clear();
  }
  return out;
}

}  // namespace sandpool
