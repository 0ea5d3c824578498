// SANDPOOL_ASAN: 1 in a build with AddressSanitizer, which cannot follow a process onto a stack
// of its own (clone with CLONE_VM on another stack): the code that does that forks instead there,
// or is not used (the nurseries).
#pragma once

// GCC says __SANITIZE_ADDRESS__, clang __has_feature(address_sanitizer).
#if defined(__SANITIZE_ADDRESS__)
#define SANDPOOL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANDPOOL_ASAN 1
#endif
#endif
#ifndef SANDPOOL_ASAN
#define SANDPOOL_ASAN 0
#endif
