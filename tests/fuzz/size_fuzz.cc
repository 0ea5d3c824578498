// libFuzzer harness: ParseSize (scheduler/config/config.h), which reads every size option (--memory,
// --work-size, ...) from flags, the environment and the config file. Properties, beyond "no
// crash or UBSan report":
//  - an accepted size is what config.h says: decimal digits, optionally followed by K, M or G
//    (either case, powers of 1024); anything else is refused;
//  - the value is the number times the suffix's power, without overflow (the plain decimal
//    form of the value parses back to it).
//
// Found and fixed (regressions/size/): a NUL byte ended the number early ("1\0junk" was 1).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "scheduler/config/config.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

// The grammar of config.h, written out independently: [0-9]+[KkMmGg]?; 0 when it does not match.
uint64_t Multiplier(const std::string& s) {
  if (s.empty()) return 0;
  uint64_t mult = 1;
  size_t digits = s.size();
  switch (s.back()) {
    case 'K': case 'k': mult = 1ull << 10; --digits; break;
    case 'M': case 'm': mult = 1ull << 20; --digits; break;
    case 'G': case 'g': mult = 1ull << 30; --digits; break;
    default: break;
  }
  if (digits == 0) return 0;
  for (size_t i = 0; i < digits; ++i) {
    if (s[i] < '0' || s[i] > '9') return 0;
  }
  return mult;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  sandpool::Result<uint64_t> v = sandpool::ParseSize(text);
  if (!v.ok()) {
    FUZZ_CHECK(!v.status().message().empty(), "a refusal says why");
    return 0;
  }
  uint64_t mult = Multiplier(text);
  FUZZ_CHECK(mult != 0, "an accepted size is [0-9]+ with an optional K, M or G");
  FUZZ_CHECK(*v % mult == 0, "the value is a multiple of the suffix's power");
  sandpool::Result<uint64_t> plain = sandpool::ParseSize(std::to_string(*v));
  FUZZ_CHECK(plain.ok() && *plain == *v, "the value in plain bytes parses back to itself");
  if (mult != 1) {
    sandpool::Result<uint64_t> number = sandpool::ParseSize(text.substr(0, text.size() - 1));
    FUZZ_CHECK(number.ok() && *number == *v / mult, "the value is the number times the power");
  }
  return 0;
}
