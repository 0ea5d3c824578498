// Copying a sparse file (a session's disk image) without reading or writing its holes: only the
// extents that hold data are copied (SEEK_DATA / SEEK_HOLE, copy_file_range), and the copy gets
// the same size, so it is as sparse as the original. Blocking; for processes that may block (the
// spawner, a keeper), never the daemon's loop.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "common/status.h"

namespace sandpool {

// Copies all of `src` (from offset 0) into `dst` (truncated to src's size first). Returns the
// bytes of data copied.
Result<uint64_t> CopySparse(int src, int dst);

// Calls `extent(offset, data)` for each extent of data in `src`, in order, in pieces of at most
// `piece` bytes. Stops at the first error the callback returns.
Status ForEachExtent(int src, uint64_t piece, const std::function<Status(uint64_t offset, std::string_view data)>& extent);

}  // namespace sandpool
