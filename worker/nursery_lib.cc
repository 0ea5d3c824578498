// libsandpool_nursery.so: the C interface a template's nursery mother (an interpreter, through
// its foreign-function interface) calls. See worker/nursery.h.
#include <cstddef>

#include "worker/nursery.h"

extern "C" {

// In the mother: clones a sandbox's init into new pid, mount, ipc and uts namespaces, with
// fds[0..5] moved to its fds 3-8. Returns init's pid (its pidfd in *pidfd) in the mother, 0 in
// init, -errno on failure.
__attribute__((visibility("default"))) long sandpool_nursery_clone(const int* fds, int nfds, int* pidfd) {
  return sandpool::NurseryCloneInit(fds, nfds, pidfd);
}

// In init (right after sandpool_nursery_clone returned 0): sets the sandbox up, forks the stub,
// confines it and returns 0 in it: the job's process. init itself never returns.
__attribute__((visibility("default"))) int sandpool_nursery_enter(const char* blob, size_t len) {
  return sandpool::NurseryEnter(blob, len);
}

}
