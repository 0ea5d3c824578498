// How a process that copies large buffers per operation (session files, job output, results)
// keeps them in its heap.
//
// By default glibc gives each allocation over 128 KiB pages of its own (mmap) and returns them at
// free, so every copy of a 1 MiB buffer touches 256 fresh pages. Where a page fault costs 10-20 us
// (the bench machines' virtual machines) that was most of a session's file transfer: a 1 MiB
// write took 15 ms in the session's agent and 4 ms with its buffers in the heap
// (bench/analysis.md). Callers: the daemon, and a session's agent, which gives the kept heap back
// when it is idle (its memory is the session's budget). The spawner, keepers and job sandboxes
// keep glibc's defaults.
#pragma once

namespace sandpool {

// Buffers up to 32 MiB come from the heap, and freed heap is kept up to 256 MiB
// (malloc_trim(0) gives it back). Call before the process allocates its large buffers.
void KeepLargeBuffersInHeap();

}  // namespace sandpool
