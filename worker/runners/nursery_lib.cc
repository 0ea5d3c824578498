// libsandpool_nursery.so: the C interface a template's nursery mother (an interpreter, through
// its foreign-function interface) calls. See worker/runners/nursery.h.
#include <cstddef>

#include "worker/runners/nursery_mother.h"

extern "C" {

// In the mother, once: the keeper's config blob. 0 or -EINVAL.
__attribute__((visibility("default"))) int sandpool_nursery_configure(const char* blob, size_t len) {
  return sandpool::NurseryConfigure(blob, len);
}

// In the mother (`sock` its socket to the keeper): makes one sandbox (nursery.h). Returns init's
// pid in the mother, 0 in the job's process, -errno on failure.
__attribute__((visibility("default"))) long sandpool_nursery_spawn(const int* fds, int nfds, int sock) {
  return sandpool::NurserySpawn(fds, nfds, sock);
}

}
