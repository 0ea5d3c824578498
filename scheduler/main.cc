// sandpoold: the sandbox pool daemon. See docs/ARCHITECTURE.md.
#include <event2/event.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

#include "common/log.h"
#include "scheduler/config.h"
#include "scheduler/daemon.h"
#include "worker/cgroup.h"
#include "worker/spawner.h"

using namespace sandpool;

int main(int argc, char** argv) {
  DaemonConfig config;
  bool exit_now = false;
  Status s = ParseConfig(argc, argv, &config, &exit_now);
  if (!s.ok()) {
    std::fprintf(stderr, "sandpoold: %s\n", s.message().c_str());
    return 2;
  }
  if (exit_now) return 0;
  SetLogComponent("sandpoold");
  SetLogLevel(config.log_level);
  if (::geteuid() != 0) {
    LogError("sandpoold must run as root: it creates namespaces, cgroups and uid maps (job code never runs as root)");
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);
  // Orphans of our process tree (a sandbox init whose keeper died) are reparented to us, not to
  // the host's init, and we reap them: no zombie is left behind on the host.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  // One fd per pipe and channel per slot; keep well clear of the default 1024.
  struct rlimit nofile;
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }

  auto layout = SetUpCgroups(config.cgroup_mode, "sandpool-" + config.consumer, config.allow_missing_controllers);
  if (!layout.ok()) {
    LogError("cgroup set-up failed", {{"error", layout.status().message()}});
    return 1;
  }
  // The spawner is forked now, while this process has exactly one thread.
  std::vector<SandboxConfig> templates;
  for (const TemplateConfig& t : config.templates) templates.push_back(t.sandbox);
  auto spawner = StartSpawner(templates, *layout, argv);
  if (!spawner.ok()) {
    LogError("cannot start the spawner", {{"error", spawner.status().message()}});
    return 1;
  }

  struct event_base* base = event_base_new();
  int code;
  {
    Daemon daemon(config, base, std::move(spawner.value()), *layout);
    s = daemon.Start();
    if (!s.ok()) {
      LogError("start-up failed", {{"error", s.message()}});
      daemon.Stop();
      code = 1;
    } else {
      event_base_dispatch(base);
      daemon.Stop();
      code = daemon.exit_code();
    }
  }
  event_base_free(base);
  return code;
}
