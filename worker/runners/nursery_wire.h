// The keeper <-> nursery mother wire (the exchange is drawn in nursery.h): the config blob the
// keeper sends once, and one tag byte with fds attached (worker/ipc/fd_passing.h) for everything
// else. Used by both sides, so the field list exists once: the keeper's (nursery.cc) and the
// mother's, inside the sandbox (nursery_mother.cc, in libsandpool_nursery.so).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"
#include "worker/ipc/fd_passing.h"  // the tag-and-fds messages of this wire
#include "worker/sandbox/sandbox_config.h"
#include "worker/seccomp/seccomp_policy.h"

namespace sandpool {

// What a mother needs to set up its children: the inside-the-sandbox part of `config`, and the
// seccomp filter. DecodeNurseryConfig, in the mother, is the inverse.
std::string EncodeNurseryConfig(const SandboxConfig& config, const SeccompProgram& seccomp);
Status DecodeNurseryConfig(std::string_view blob, SandboxConfig* config, SeccompProgram* seccomp);

}  // namespace sandpool
