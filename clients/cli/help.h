// Usage texts of the CLI, one per subcommand ("" for the top level).
#pragma once

#include <string_view>

namespace sandpool::cli {

// The --help text of `command` ("run", "submit", ...); the overview for "" or anything unknown.
std::string_view HelpText(std::string_view command);

}  // namespace sandpool::cli
