// The keeper <-> nursery mother wire (the exchange is drawn in nursery.h): the config blob the
// keeper sends once, and one tag byte with fds attached (SCM_RIGHTS) for everything else. Used by
// both sides, so the field list and the framing exist once: the keeper's (nursery.cc) and the
// mother's, inside the sandbox (nursery_mother.cc, in libsandpool_nursery.so). The senders and
// receivers make system calls only (async-signal-safe): the mother calls them between clones.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/fd.h"
#include "common/status.h"
#include "worker/sandbox/sandbox_config.h"
#include "worker/seccomp/seccomp_policy.h"

namespace sandpool {

// What a mother needs to set up its children: the inside-the-sandbox part of `config`, and the
// seccomp filter. DecodeNurseryConfig, in the mother, is the inverse.
std::string EncodeNurseryConfig(const SandboxConfig& config, const SeccompProgram& seccomp);
Status DecodeNurseryConfig(std::string_view blob, SandboxConfig* config, SeccompProgram* seccomp);

// One tag byte with `n` (<= 8) fds attached.
Status SendWithFds(int sock, char tag, const int* fds, size_t n);
// One tag byte and at most one fd (more are closed: never more than asked for).
Status ReceiveWithFd(int sock, char* tag, UniqueFd* fd);
// One tag byte and at most `max` (<= 8) fds, which the caller then owns (`*got` of them).
Status ReceiveWithFds(int sock, char* tag, int* fds, size_t max, size_t* got);

}  // namespace sandpool
