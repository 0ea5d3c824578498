#include "scheduler/net/dns_answer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sandpool {
namespace {

// Wire-format builders, without name compression.
void Name(std::vector<uint8_t>& out, const std::string& name) {
  size_t start = 0;
  while (start < name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    out.push_back(static_cast<uint8_t>(dot - start));
    out.insert(out.end(), name.begin() + static_cast<long>(start), name.begin() + static_cast<long>(dot));
    start = dot + 1;
  }
  out.push_back(0);
}
void U16(std::vector<uint8_t>& out, uint16_t v) { out.push_back(v >> 8), out.push_back(v & 255); }
void U32(std::vector<uint8_t>& out, uint32_t v) { U16(out, v >> 16), U16(out, v & 0xffff); }

std::vector<uint8_t> Header(uint16_t id, uint16_t flags, uint16_t qd, uint16_t an) {
  std::vector<uint8_t> out;
  U16(out, id), U16(out, flags), U16(out, qd), U16(out, an), U16(out, 0), U16(out, 0);
  return out;
}

std::vector<uint8_t> Query(const std::string& name, uint16_t type = kDnsTypeA, uint16_t id = 0x1234) {
  std::vector<uint8_t> q = Header(id, 0x0100, 1, 0);
  Name(q, name), U16(q, type), U16(q, 1);
  return q;
}

struct Rr {
  std::string owner;
  uint16_t type;
  uint32_t ttl;
  std::string cname;  // CNAME target
  uint32_t addr = 0;  // A
};

std::vector<uint8_t> Answer(const std::string& qname, const std::vector<Rr>& rrs, uint16_t rcode = 0) {
  std::vector<uint8_t> a = Header(0x9999, static_cast<uint16_t>(0x8180 | rcode), 1, static_cast<uint16_t>(rrs.size()));
  Name(a, qname), U16(a, kDnsTypeA), U16(a, 1);
  for (const Rr& r : rrs) {
    Name(a, r.owner), U16(a, r.type), U16(a, 1), U32(a, r.ttl);
    std::vector<uint8_t> data;
    if (r.type == 5) Name(data, r.cname);
    else U32(data, r.addr);
    U16(a, static_cast<uint16_t>(data.size()));
    a.insert(a.end(), data.begin(), data.end());
  }
  return a;
}

bool Private(uint32_t a) { return (a >> 24) == 10; }

TEST(DnsAnswer, ParsesOneQuestionInLowerCase) {
  auto q = ParseDnsQuery(Query("Registry.NPM.example"));
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_EQ(q->id, 0x1234);
  EXPECT_EQ(q->name, "registry.npm.example");
  EXPECT_EQ(q->qtype, kDnsTypeA);
  EXPECT_EQ(q->udp_size, 512);
  EXPECT_FALSE(ParseDnsQuery(Answer("a.example", {})).ok());  // a response
  std::vector<uint8_t> two = Header(1, 0x0100, 2, 0);
  Name(two, "a.example"), U16(two, 1), U16(two, 1), Name(two, "b.example"), U16(two, 1), U16(two, 1);
  EXPECT_FALSE(ParseDnsQuery(two).ok());
  EXPECT_FALSE(ParseDnsQuery(std::vector<uint8_t>{1, 2, 3}).ok());
}

TEST(DnsAnswer, LocalReplyKeepsIdAndQuestion) {
  std::vector<uint8_t> q = Query("Other.example");
  std::vector<uint8_t> r = LocalDnsReply(q, kRcodeNxDomain);
  ASSERT_GE(r.size(), 12u);
  EXPECT_EQ(r[0], 0x12);
  EXPECT_EQ(r[1], 0x34);
  EXPECT_EQ(r[2] & 0x80, 0x80);       // QR
  EXPECT_EQ(r[3] & 0x0f, kRcodeNxDomain);
  EXPECT_EQ(std::vector<uint8_t>(r.begin() + 12, r.end()), std::vector<uint8_t>(q.begin() + 12, q.end()));
}

TEST(DnsAnswer, KeepsTheChainFromTheNameAskedAndItsAddressesOnly) {
  auto q = Query("www.npm.example");
  auto up = Answer("www.npm.example", {
      {"www.npm.example", 5, 60, "registry.npm.example"},
      {"registry.npm.example", 1, 30, "", 0xc6336400 + 10},
      {"elsewhere.example", 1, 30, "", 0xc6336400 + 99},  // not on the chain: dropped
      {"registry.npm.example", 1, 5000, "", 0xc6336400 + 11},
  });
  FilteredAnswer a = FilterDnsAnswer(q, up, Private, 60, 3600, true);
  EXPECT_EQ(a.rcode, kRcodeNoError);
  ASSERT_EQ(a.opened.size(), 2u);
  EXPECT_EQ(a.opened[0].addr, 0xc6336400u + 10);
  EXPECT_EQ(a.opened[0].ttl, 60u);    // clamped up
  EXPECT_EQ(a.opened[1].ttl, 3600u);  // and down
  EXPECT_EQ(a.wire[0], 0x12);         // the client's id, not upstream's
  EXPECT_EQ(a.wire[7], 3);            // CNAME + 2 A
}

TEST(DnsAnswer, AnAllowedNamePointingAtPrivateAddressesIsRefused) {
  auto q = Query("rebind.example");
  FilteredAnswer a = FilterDnsAnswer(q, Answer("rebind.example", {{"rebind.example", 1, 30, "", 0x0a000001}}), Private, 1, 10, true);
  EXPECT_EQ(a.rcode, kRcodeRefused);
  EXPECT_TRUE(a.opened.empty());
  EXPECT_EQ(a.dropped, 1u);
  // Mixed: the private one goes, the public one stays.
  a = FilterDnsAnswer(q, Answer("rebind.example", {{"rebind.example", 1, 30, "", 0x0a000001},
                                                   {"rebind.example", 1, 30, "", 0xcb007101}}), Private, 1, 10, true);
  EXPECT_EQ(a.rcode, kRcodeNoError);
  ASSERT_EQ(a.opened.size(), 1u);
  EXPECT_EQ(a.opened[0].addr, 0xcb007101u);
}

TEST(DnsAnswer, UpstreamFailuresAndGarbageBecomeServfailOrPassNxdomain) {
  auto q = Query("a.example");
  EXPECT_EQ(FilterDnsAnswer(q, std::vector<uint8_t>{0, 1, 2}, Private, 1, 10, true).rcode, kRcodeServFail);
  EXPECT_EQ(FilterDnsAnswer(q, Answer("a.example", {}, 3), Private, 1, 10, true).rcode, kRcodeNxDomain);
  EXPECT_EQ(FilterDnsAnswer(q, Answer("a.example", {}, 5), Private, 1, 10, true).rcode, kRcodeServFail);
}

TEST(DnsAnswer, KeepsAtMost16AddressesAndFitsTheClientsUdpSize) {
  auto q = Query("big.example");
  std::vector<Rr> rrs;
  for (uint32_t i = 0; i < 60; ++i) rrs.push_back({"big.example", 1, 30, "", 0xcb007100 + i});
  for (bool udp : {true, false}) {
    FilteredAnswer a = FilterDnsAnswer(q, Answer("big.example", rrs), Private, 1, 10, udp);
    EXPECT_LE(a.wire.size(), 512u);  // 16 compressed A records fit a plain UDP reply
    EXPECT_EQ(a.opened.size(), 16u);
    EXPECT_EQ(a.opened.front().addr, 0xcb007100u);
  }
}

}  // namespace
}  // namespace sandpool
