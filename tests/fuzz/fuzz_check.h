// FUZZ_CHECK: a property a harness asserts on every input. A failure prints the property and
// aborts; libFuzzer reports that as a crash and saves the input (crash-<sha1>) to reproduce it.
// Not a gtest assertion: a harness has no test runner, and the input must stop right there.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond, what)                                                         \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s\n  property: %s\n", __FILE__, \
                   __LINE__, #cond, what);                                             \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)
