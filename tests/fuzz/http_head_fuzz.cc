// libFuzzer harness: the preview proxy's request-head parser and rewriter (scheduler/
// http_head.h), which read whatever anyone who reaches the proxy's port sends. Properties,
// beyond "no crash, leak or UBSan report":
//  - an accepted head rewrites to a head that is accepted again, with the same method, the new
//    target, exactly one Host (localhost:<port>) and no header the client could smuggle in;
//  - a token split off a target is 1..64 of [a-z0-9], and the rest starts with '/'.
#include <cstddef>
#include <cstdint>
#include <string>

#include "scheduler/preview/http_head.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandpool;
  std::string input(reinterpret_cast<const char*>(data), size);
  auto split = SplitPreviewTarget(input);
  if (split) {
    FUZZ_CHECK(!split->first.empty() && split->first.size() <= 64, "tokens are 1..64 characters");
    FUZZ_CHECK(!split->second.empty() && split->second[0] == '/', "the rest is a path");
  }
  auto head = ParseHttpHead(input);
  if (!head.ok()) return 0;
  std::string out = RewriteHttpHead(*head, "/x", 8080, "192.0.2.1", "/t");
  auto again = ParseHttpHead(out);
  FUZZ_CHECK(again.ok(), "a rewritten head parses");
  FUZZ_CHECK(again->method == head->method && again->target == "/x", "method kept, target replaced");
  FUZZ_CHECK(*again->Find("host") == "localhost:8080", "one Host, ours");
  FUZZ_CHECK(*again->Find("x-forwarded-for") == "192.0.2.1", "the client cannot set X-Forwarded-For");
  return 0;
}
