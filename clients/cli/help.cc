#include "clients/cli/help.h"

#include <string>

namespace sandpool::cli {
namespace {

constexpr std::string_view kGlobal = R"(
Global options (anywhere before the command):
  --redis URL     redis://[user:password@]host:port[/db] or unix:///path[?db=N]
                  (default: $SANDPOOL_REDIS_URL, else redis://127.0.0.1:6379)
  --prefix P      key prefix (default: sandpool)
  --queue Q       queue name (default: default)
)";

constexpr std::string_view kJobOptions = R"(
Job options:
  --timeout SECONDS     wall time limit (decimals allowed); --timeout-ms MS in milliseconds
  --env NAME=VALUE      set an environment variable (repeatable)
  --cwd DIR             absolute working directory in the sandbox (default /work)
  --stdin-file FILE     send FILE as the job's stdin; --stdin sends this process's stdin
  --max-output BYTES    keep at most BYTES per stream (suffixes k, M, G)
  --id ID               job id (default: 128 random bits in hex); same id = same job
  --retries N           re-run up to N times (0..5) if the daemon running it dies
  --shell 'LINE'        run LINE with /bin/sh -c instead of a command after --
  --python 'CODE'       run CODE as python3 -c would, in a warm interpreter (also --node, --bash)
  --template NAME       run in the daemon's template NAME (default: by runtime, else 'default')
  --memory MIB          memory limit of the sandbox (clamped to the daemon's maximum)
)";

constexpr std::string_view kTop = R"(usage: sandpool [global options] COMMAND [options]

Commands:
  run      run a job and stream its output; exits with the job's status
  submit   queue a job and print its id
  result   print a finished job's output; exits with the job's status
  cancel   cancel a queued or running job
  status   queue and daemon overview, or one job's state
  top      live view of the fleet (daemons, slots, jobs/s, latency, queue, failures)
  session  sandboxes that keep files and processes between commands (create, exec, ...)

'sandpool COMMAND --help' describes each command.
)";

constexpr std::string_view kRun = R"(usage: sandpool run [options] -- CMD [ARGS...]
       sandpool run [options] --shell 'LINE'

Runs the job, writing its stdout and stderr here as it produces them, and exits with its
status: the exit code; 128+N for signal N; 124 timeout; 130 cancelled; 137 output, memory or
CPU limit; 159 forbidden system call; 125 when the job could not run (the reason is printed as
'sandpool: <code>: <message>') or Redis could not be reached; 2 for bad usage.

  --json                print only the final result, as one JSON object
)";

constexpr std::string_view kSubmit = R"(usage: sandpool submit [options] -- CMD [ARGS...]
       sandpool submit [options] --shell 'LINE'

Queues the job and prints its id. Fetch the outcome later with 'sandpool result ID'.
)";

constexpr std::string_view kResult = R"(usage: sandpool result [--wait] [--timeout SECONDS] [--json] ID

Prints the stored result of job ID (stdout and stderr to their streams) and exits with the
job's status (see 'sandpool run --help'). Without a result yet: prints 'not finished' and
exits 3, or with --wait waits for it (at most --timeout seconds).

  --json     print the result as one JSON object instead
)";

constexpr std::string_view kCancel = R"(usage: sandpool cancel ID

Cancels job ID: a queued job never starts, a running one is killed (its output so far is
kept). A finished job is not affected. Exits 0 once the request is stored.
)";

constexpr std::string_view kStatus = R"(usage: sandpool status [ID]

Without ID: the queue's length, its consumer group (pending entries, lag) and the live daemons.
With ID: the job's state fields and whether its result is stored.
)";

constexpr std::string_view kSession = R"(usage: sandpool session SUBCOMMAND ID [options]

A session is a sandbox that keeps its files and processes between commands, stops (files kept)
and resumes. Each subcommand is one operation; values print as JSON; errors as
'sandpool: <code>: <message>' with exit status 1.

  create ID [--template T] [--memory SIZE] [--disk SIZE] [--pids N] [--cpus F]
            [--idle-timeout SECONDS] [--lifetime SECONDS] [--ephemeral]
            [--label K=V]... [--env K=V]... [--wait SECONDS]
                        create, or connect to a running one, or resume a stopped one
  info ID               state, limits and usage
  stop ID               end every process; keep every file
  destroy ID            remove it and its files
  ls                    every session: id, state, template, host
  exec ID [--as-root] [job options] -- CMD...   (or --shell 'LINE')
                        run a command in it; streams its output, exits with its status
  write|put ID PATH [--mode OCTAL] [--as-root]  write stdin to PATH in the session
  read|get ID PATH [--as-root]                  print the file at PATH
  snapshot ID NAME      its files become template NAME: 'create NEW --template NAME' on any host
  spawn ID [--env K=V] [--cwd DIR] -- CMD...    (or --shell 'LINE') start a background process
  ps ID                 its background processes
  logs ID PID [--wait] [--tail N]               a background process's output
  kill ID PID [--signal N]
  expose ID PORT        an HTTP preview URL for a server the session runs on PORT
                        (prints {port, url, ...}; the same URL while it stays exposed)
  unexpose ID PORT      the URL stops working
  ports ID              its exposed ports
)";

}  // namespace

std::string_view HelpText(std::string_view command) {
  // Each text is followed by the option lists that apply to it; built once.
  static const std::string run = std::string(kRun) + std::string(kJobOptions) + std::string(kGlobal);
  static const std::string submit =
      std::string(kSubmit) + std::string(kJobOptions) + std::string(kGlobal);
  static const std::string result = std::string(kResult) + std::string(kGlobal);
  static const std::string cancel = std::string(kCancel) + std::string(kGlobal);
  static const std::string status = std::string(kStatus) + std::string(kGlobal);
  static const std::string top = std::string(kTop) + std::string(kGlobal);
  if (command == "run") return run;
  if (command == "submit") return submit;
  if (command == "result") return result;
  if (command == "cancel") return cancel;
  if (command == "status") return status;
  static const std::string session = std::string(kSession) + std::string(kJobOptions) + std::string(kGlobal);
  if (command == "session") return session;
  return top;
}

}  // namespace sandpool::cli
