// Feeds random and mutated byte strings to every decoder. The assertion is mostly "did not crash,
// did not throw, did not hang" (run under ASan/UBSan in CI to make it sharp), plus invariants
// that hold for any input: a decoded job re-encodes to something that decodes to the same job.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "queue/protocol.h"

namespace sandpool {
namespace {

std::vector<std::string> Seeds() {
  JobSpec a;
  a.id = "seed-a";
  a.argv = {"/bin/echo", "hello", "world"};
  a.env = {{"A", "1"}, {"LONGER_NAME", "value"}};
  a.cwd = "/work/x";
  a.stdin_data = "input";
  a.timeout_ms = 100;
  a.max_output_bytes = 10;
  a.retries = 1;
  JobSpec b;
  b.id = "seed-b";
  b.shell = "echo hi | wc -c";
  JobResult r;
  r.id = "seed-r";
  r.outcome = Outcome::kExit;
  r.exit_code = 1;
  r.stdout_data = "out";
  r.error = JobError{ErrorCode::kInternal, "m"};
  return {EncodeJob(a),
          EncodeJob(b),
          EncodeResult(r),
          EncodeStartedEvent(0, "w", 1),
          EncodeOutputEvent(1, "stdout", "data"),
          EncodeExitedEvent(2, r)};
}

void CheckAll(const std::string& bytes, const ServerLimits& lim) {
  auto j = DecodeJob(bytes, lim);
  if (auto* spec = std::get_if<JobSpec>(&j)) {
    // Anything accepted must be self-consistent and survive a round trip unchanged.
    ASSERT_TRUE(ValidJobId(spec->id));
    ASSERT_NE(spec->argv.empty(), !spec->shell.has_value());
    ASSERT_GE(spec->timeout_ms, 1u);
    ASSERT_LE(spec->timeout_ms, lim.max_timeout_ms);
    ASSERT_LE(spec->max_output_bytes, lim.max_output_bytes);
    auto again = DecodeJob(EncodeJob(*spec), lim);
    ASSERT_TRUE(std::holds_alternative<JobSpec>(again));
    const JobSpec& s2 = std::get<JobSpec>(again);
    ASSERT_EQ(s2.id, spec->id);
    ASSERT_EQ(s2.argv, spec->argv);
    ASSERT_EQ(s2.shell, spec->shell);
    ASSERT_EQ(s2.env, spec->env);
    ASSERT_EQ(s2.stdin_data, spec->stdin_data);
  } else {
    ASSERT_FALSE(std::get<JobError>(j).message.empty());
  }
  if (auto r = DecodeResult(bytes)) {
    auto r2 = DecodeResult(EncodeResult(*r));
    ASSERT_TRUE(r2.has_value());
    ASSERT_EQ(r2->stdout_data, r->stdout_data);
  }
  (void)DecodeEvent(bytes);
}

TEST(ProtocolFuzz, RandomBytes) {
  std::mt19937_64 rng(12345);
  ServerLimits lim;
  for (int i = 0; i < 20000; ++i) {
    size_t len = rng() % 64;
    std::string s(len, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    // Bias toward maps so the field-level code is reached, not just the parser.
    if (len > 0 && (i % 2) == 0) s[0] = static_cast<char>(0x80 | (rng() % 12));
    ASSERT_NO_FATAL_FAILURE(CheckAll(s, lim));
  }
}

TEST(ProtocolFuzz, MutatedValidMessages) {
  std::mt19937_64 rng(777);
  ServerLimits lim;
  lim.max_stdin_bytes = 1000;
  std::vector<std::string> seeds = Seeds();
  int accepted = 0;
  for (int i = 0; i < 30000; ++i) {
    std::string s = seeds[rng() % seeds.size()];
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      size_t pos = rng() % s.size();
      switch (rng() % 6) {
        case 0: s[pos] = static_cast<char>(rng()); break;                      // replace
        case 1: s[pos] = static_cast<char>(s[pos] ^ (1 << (rng() % 8))); break;  // bit flip
        case 2: s.erase(pos, 1 + rng() % 4); break;                            // delete
        case 3: s.insert(pos, 1, static_cast<char>(rng())); break;             // insert
        case 4: s.resize(pos); break;                                          // truncate
        case 5: {                                                              // size-ish bytes
          static const unsigned char kInteresting[] = {0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc6,
                                                       0xcc, 0xcf, 0xd3, 0xd9, 0xdb, 0xdc,
                                                       0xdd, 0xde, 0xdf, 0xff, 0x00, 0x7f};
          s[pos] = static_cast<char>(kInteresting[rng() % sizeof(kInteresting)]);
          break;
        }
      }
    }
    ASSERT_NO_FATAL_FAILURE(CheckAll(s, lim));
    if (std::holds_alternative<JobSpec>(DecodeJob(s, lim))) ++accepted;
  }
  // The mutations must leave some inputs valid, or this test only exercised the parser.
  EXPECT_GT(accepted, 100);
}

TEST(ProtocolFuzz, AllSeedPrefixesAndSuffixes) {
  ServerLimits lim;
  for (const std::string& seed : Seeds()) {
    for (size_t n = 0; n <= seed.size(); ++n) {
      ASSERT_NO_FATAL_FAILURE(CheckAll(seed.substr(0, n), lim));
      ASSERT_NO_FATAL_FAILURE(CheckAll(seed.substr(n), lim));
    }
  }
}

}  // namespace
}  // namespace sandpool
