// libsandpool_nursery.so: the C interface a template's nursery mother (an interpreter, through
// its foreign-function interface) calls. See worker/runners/nursery.h.
#include "worker/runners/nursery_mother.h"

extern "C" {

// In the mother (`sock` her socket to the keeper, after her 'R'): the keeper's config, then
// sandbox after sandbox (nursery_mother.h, NurseryServe). Returns 0 only in each job's process;
// in the mother, -errno once there is nothing more to serve.
__attribute__((visibility("default"))) long sandpool_nursery_serve(int sock) {
  return sandpool::NurseryServe(sock);
}

}
