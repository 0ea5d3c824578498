// `sandpool session ...`: sessions from the command line (PROTOCOL.md sections 12-19). Each
// subcommand is one operation sent to the daemon holding the session, waited for, and printed:
// values as JSON, a command's output as it comes (exec exits with the command's status).
#pragma once

#include <string>
#include <vector>

#include "clients/cli/job_options.h"

namespace sandpool::cli {

// Exit status of a session operation that ended with an error (its code printed on stderr).
inline constexpr int kExitOpFailed = 1;

int SessionCommand(const std::vector<std::string>& args, GlobalOptions g);

}  // namespace sandpool::cli
