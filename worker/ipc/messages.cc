#include "worker/ipc/messages.h"

namespace sandpool {

// Every message between sandpool's own processes: packed whole, decoded within kInternalLimits.
#define SANDPOOL_INTERNAL_MESSAGE(M)                                     \
  std::string Encode(const M& m) { return EncodeMsg(m); }                \
  Status Decode(std::string_view in, M* m) { return DecodeMsg(in, m, kInternalLimits); }

SANDPOOL_INTERNAL_MESSAGE(ReadyMsg)
SANDPOOL_INTERNAL_MESSAGE(RunMsg)
SANDPOOL_INTERNAL_MESSAGE(ExitedMsg)
SANDPOOL_INTERNAL_MESSAGE(GenerationMsg)
SANDPOOL_INTERNAL_MESSAGE(FailedMsg)
SANDPOOL_INTERNAL_MESSAGE(SpawnKeeperMsg)
SANDPOOL_INTERNAL_MESSAGE(KeeperMsg)
SANDPOOL_INTERNAL_MESSAGE(NurseryConfigMsg)
SANDPOOL_INTERNAL_MESSAGE(MakeDiskMsg)
SANDPOOL_INTERNAL_MESSAGE(DiskMadeMsg)

#undef SANDPOOL_INTERNAL_MESSAGE

}  // namespace sandpool
