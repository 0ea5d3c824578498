// The CLI's subcommands. Each takes the arguments after its name (global options may appear
// among them), prints what the user asked for, and returns the process exit status: the job's
// own status (PROTOCOL.md section 5) where there is a job result, kExitUsage for bad arguments,
// kExitNotFinished when a result is not there yet, kExitFailure when Redis could not be used.
#pragma once

#include <string>
#include <vector>

#include "clients/cli/job_options.h"

namespace sandpool::cli {

int RunCommand(const std::vector<std::string>& args, GlobalOptions g);
int SubmitCommand(const std::vector<std::string>& args, GlobalOptions g);
int ResultCommand(const std::vector<std::string>& args, GlobalOptions g);
int CancelCommand(const std::vector<std::string>& args, GlobalOptions g);
int StatusCommand(const std::vector<std::string>& args, GlobalOptions g);

// Prints a finished job (or session command) the way `run` and `result` do: its output (past
// the first skip_* bytes already streamed) and outcome line, or JSON; returns its exit status.
int FinishJob(const JobResult& r, bool json, uint64_t skip_stdout, uint64_t skip_stderr);

// "sandpool: <message>" on stderr.
void PrintError(std::string_view message);

}  // namespace sandpool::cli
