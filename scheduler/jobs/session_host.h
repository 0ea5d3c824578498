// What sessions (scheduler/sessions/) need from the host's sandbox machinery: session keepers,
// disk images and a share of the host budget. Pools (pools.h) is the daemon's one; the interface
// is what lets Sessions be unit-tested with a test that plays the keeper (the far end of a socket
// pair) instead of a spawner and real sandboxes.
//
// Ownership: the implementation outlives every caller. Loop thread only; callbacks run on it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>

#include "common/fd.h"

namespace sandpool {

class SessionHost {
 public:
  virtual ~SessionHost() = default;

  // A started session keeper (worker/session_keeper.h): its slot number (the caller's until
  // ReleaseSessionSlot), process, and channel.
  struct KeeperHandle {
    uint32_t slot = 0;
    pid_t pid = -1;
    UniqueFd channel, pidfd;
  };
  // Starts a session keeper of template `t`; `done` gets it, or an invalid handle (channel not
  // valid) if no keeper can be started.
  virtual void SpawnSessionKeeper(uint32_t t, std::function<void(KeeperHandle)> done) = 0;
  virtual void ReleaseSessionSlot(uint32_t slot) = 0;
  // Session slots no keeper holds now (SpawnSessionKeeper refuses when there are none).
  virtual size_t FreeSessionSlots() const = 0;
  // Makes a session disk image at `path`, or, with `from`, a sparse copy of the image at `from`;
  // `done` gets "" or why not, and the bytes of data copied.
  using DiskDone = std::function<void(std::string error, uint64_t data_bytes)>;
  virtual void MakeDisk(const std::string& path, uint64_t bytes, const std::string& from, DiskDone done) = 0;
  // The host budget is shared with the job pools: a running session holds one sandbox and its
  // memory limit. Take returns false when it does not fit.
  virtual bool SessionFits(uint64_t memory_bytes) const = 0;
  virtual bool TakeSessionBudget(uint64_t memory_bytes) = 0;
  virtual void ReturnSessionBudget(uint64_t memory_bytes) = 0;
};

}  // namespace sandpool
