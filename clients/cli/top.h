// `sandpool top`: a live view of the fleet from Redis alone (no Prometheus): every daemon's
// heartbeat record (PROTOCOL.md section 10: its pools per template, the queue's figures, its
// last minute of jobs) and the queue's length. Refreshes in place every --interval seconds
// (default 1) in at most 80 columns; `q` or Ctrl-C leaves, restoring the terminal. With no
// daemon alive, or Redis unreachable, it says so and keeps trying.
//   --once          print one view and exit (1 if Redis was unreachable)
//   --json          with --once: the same figures as one JSON object
#pragma once

#include <string>
#include <vector>

#include "clients/cli/job_options.h"

namespace sandpool::cli {

int TopCommand(const std::vector<std::string>& args, GlobalOptions g);

}  // namespace sandpool::cli
