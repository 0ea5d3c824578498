#include "common/heap.h"

#include <malloc.h>

namespace sandpool {

void KeepLargeBuffersInHeap() {
  (void)::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  (void)::mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

}  // namespace sandpool
