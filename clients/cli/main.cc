// sandpool: the command-line client. Global options, then a subcommand (see help.cc).
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "clients/cli/commands.h"
#include "clients/cli/help.h"
#include "clients/cli/map.h"
#include "clients/cli/output.h"
#include "clients/cli/session.h"
#include "clients/cli/top.h"

int main(int argc, char** argv) {
  using namespace sandpool::cli;
  // A closed stdout (`sandpool run ... | head`) must not kill us before the exit status is known;
  // writes report EPIPE instead.
  signal(SIGPIPE, SIG_IGN);

  GlobalOptions g;
  if (const char* env = getenv("SANDPOOL_REDIS_URL"); env != nullptr && *env != '\0') {
    g.redis_url = env;
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  size_t i = 0;
  for (; i < args.size(); ++i) {
    auto global = ConsumeGlobalOption(args, &i, &g);
    if (!global.ok()) {
      PrintError(global.status().message());
      return kExitUsage;
    }
    if (!global.value()) break;
  }
  if (i >= args.size() || args[i] == "--help" || args[i] == "-h" || args[i] == "help") {
    (void)WriteFd(i >= args.size() ? STDERR_FILENO : STDOUT_FILENO, HelpText(""));
    return i >= args.size() ? kExitUsage : 0;
  }
  const std::string command = args[i];
  std::vector<std::string> rest(args.begin() + static_cast<long>(i) + 1, args.end());
  if (command == "run") return RunCommand(rest, g);
  if (command == "submit") return SubmitCommand(rest, g);
  if (command == "result") return ResultCommand(rest, g);
  if (command == "cancel") return CancelCommand(rest, g);
  if (command == "status") return StatusCommand(rest, g);
  if (command == "session") return SessionCommand(rest, g);
  if (command == "top") return TopCommand(rest, g);
  if (command == "map") return MapCommand(rest, g);
  PrintError("unknown command '" + command + "'; see 'sandpool --help'");
  return kExitUsage;
}
