// Start-up checks of what a sandbox manager needs from its host or container, run by main before
// anything else is set up, so that a daemon started with too little privilege says exactly what
// is missing and exits at once instead of failing later, on the first job (docs/SECURITY.md,
// "Running sandpoold in a container").
//
// Each check reads the process's own state (capability sets, /proc/self/mountinfo, seccomp and
// AppArmor status, sysctls) or makes a system call that cannot succeed (invalid arguments), so
// that a seccomp filter answering for the kernel shows itself; none changes anything.
#pragma once

#include <string>
#include <vector>

namespace sandpool {

struct PreflightInput {
  // Where the files are read (tests point these elsewhere).
  std::string proc = "/proc";
};

// One line per problem ("capability CAP_SYS_ADMIN is missing: mounts, namespaces ... (podman
// --cap-add SYS_ADMIN, Kubernetes securityContext.capabilities.add)"); empty: nothing missing.
std::vector<std::string> Preflight(const PreflightInput& in = {});

// The capabilities sandpoold uses, with what each is for (also what the manifests grant).
struct NeededCapability {
  int cap;
  const char* name;
  const char* why;
};
const std::vector<NeededCapability>& NeededCapabilities();

}  // namespace sandpool
