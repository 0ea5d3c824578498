// `sandpool map`: many jobs from a file, one result line each as it finishes (PROTOCOL.md section
// 21: pipelined submission, one completion stream). The pure parts are declared here for tests;
// MapCommand does the I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "clients/cli/job_options.h"
#include "queue/protocol.h"

namespace sandpool::cli {

struct MapOptions {
  size_t concurrency = 64;
  std::string template_name;       // --template: for jobs that name none
  uint64_t timeout_ms = 0;         // --timeout: for jobs that set none (0: the daemon's)
  std::optional<std::string> shell;  // --shell CMD: each input line is substituted for {}
  bool resume = false;
  bool fail_on_nonzero = false;
  bool help = false;
  std::string input = "-";  // file of jobs, "-": stdin
};

Result<MapOptions> ParseMapOptions(const std::vector<std::string>& args, GlobalOptions* g);

// One input line as a job: its id and msgpack job map (v 4), or why it cannot be one
// (bad_payload: not a JSON object; bad_field: a field the protocol refuses). Jobs without an
// "id" get "<run>-<line_no>", so a resumed run gives a line the same id again.
struct LineJob {
  std::string id;
  std::string payload;
};
std::variant<LineJob, JobError> LineToJob(std::string_view line, size_t line_no, const MapOptions& o,
                                          const std::string& run);

// `s` as one sh word: '...' with each ' written '\''.
std::string ShellQuote(std::string_view s);

// What a previous run left in the output: the ids that have a result line, and the run name
// its generated ids carry ("" when none).
struct Resumed {
  std::set<std::string> ids;
  std::string run;
};
Resumed ReadResumed(std::string_view output);

int MapCommand(const std::vector<std::string>& args, GlobalOptions g);

}  // namespace sandpool::cli
