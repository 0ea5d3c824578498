// sandpoold: the sandbox pool daemon. See docs/ARCHITECTURE.md.
#include <event2/event.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/heap.h"
#include "common/log.h"
#include "scheduler/config/config.h"
#include "scheduler/daemon/daemon.h"
#include "scheduler/daemon/preflight.h"
#include "scheduler/daemon/sd_notify.h"
#include "scheduler/net/net_setup.h"
#include "worker/keeper/spawner.h"
#include "worker/keeper/template_build.h"
#include "worker/sandbox/cgroup.h"

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
  // Too little privilege (a container without the capabilities, seccomp, AppArmor, /proc or
  // cgroup settings sandboxes need) is said here, each missing piece by name, not on the first job.
  std::vector<std::string> missing = Preflight();
  if (!missing.empty()) {
    for (const std::string& m : missing) {
      LogError("cannot make sandboxes here", {{"missing", m}});
      std::fprintf(stderr, "sandpoold: %s\n", m.c_str());
    }
    return 1;
  }
  // systemd's notify socket, read and removed from the environment before anything forks.
  auto notify = SdNotify::FromEnvironment();
  if (!notify.ok()) {
    LogError("systemd notification", {{"error", notify.status().message()}});
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

  // SCHED_BATCH (--cpu-policy), set while this process has one thread and no child, so that every
  // thread and process after it (spawner, keepers, sandboxes) inherits it: a process woken by a
  // message (the daemon by Redis, a keeper by the daemon) then waits for the running one's turn
  // to end instead of preempting it, and takes more of its events at once. Measured on 2 cores:
  // context switches per python job 58 -> 45, echo +8% and python +5% jobs/s in 5 of 6 pairs
  // each (bench/analysis.md). Same CPU share as SCHED_OTHER; a job may set itself back.
  if (config.cpu_batch) {
    struct sched_param none = {};
    if (::sched_setscheduler(0, SCHED_BATCH, &none) != 0) {
      LogWarn("cannot run under SCHED_BATCH; staying with the default policy", {{"error", std::strerror(errno)}});
    }
  }
  auto layout = SetUpCgroups(config.cgroup_mode, "sandpool-" + config.consumer, config.allow_missing_controllers);
  if (!layout.ok()) {
    LogError("cgroup set-up failed", {{"error", layout.status().message()}});
    return 1;
  }
  // Network templates (scheduler/net/net_setup.h): before the spawner, while there is one thread.
  auto network = SetUpNetwork(&config);
  if (!network.ok()) {
    LogError("network set-up failed", {{"error", network.status().message()}});
    std::fprintf(stderr, "sandpoold: %s\n", network.status().message().c_str());
    return 1;
  }
  // The spawner is forked now, while this process has exactly one thread.
  // Template layers: each template with setup commands gets a layer directory named by a hash
  // of its definition; layers not built yet are built now, through the spawner, before anything
  // is served. Build sandboxes use slots past the pools' range (their own host uids).
  std::vector<SandboxConfig> templates;
  struct Build {
    size_t tmpl;
    uint32_t config_index;
    std::string dir;
    uint32_t slot;
  };
  std::vector<Build> builds;
  uint32_t layered = 0;
  for (TemplateConfig& t : config.templates) {
    if (!t.setup.empty()) {
      // The template's build slot, past the pools' range: its users own the layer's files
      // (each pool slot sees them as its own users through an idmapped mount), so the owner is
      // part of the layer's identity like everything else that shapes it.
      uint32_t build_slot = config.max_sandboxes + layered++;
      t.sandbox.layer_owner_base = config.sandbox.SlotRootId(build_slot);
      std::vector<std::string> parts = {"layer-v2", t.name, t.sandbox.layer_mount, t.sandbox.runtime,
                                        t.sandbox.root_dir, std::to_string(t.sandbox.layer_owner_base)};
      parts.insert(parts.end(), t.env.begin(), t.env.end());
      parts.insert(parts.end(), t.setup.begin(), t.setup.end());
      std::string dir = config.state_dir + "/templates/" + t.name + "-" + LayerHash(parts);
      t.sandbox.layer_host_dir = dir + "/layer";
      if (::access((dir + "/complete").c_str(), F_OK) != 0) {
        builds.push_back({static_cast<size_t>(&t - &config.templates[0]), 0, dir, build_slot});
      }
    }
    templates.push_back(t.sandbox);
  }
  for (Build& b : builds) {
    SandboxConfig build = config.templates[b.tmpl].sandbox;
    build.runtime.clear();
    build.layer_writable = true;
    build.network = SlotNetwork{};  // builds run the operator's setup lines, offline
    b.config_index = static_cast<uint32_t>(templates.size());
    templates.push_back(build);
  }
  auto spawner = StartSpawner(templates, *layout, argv);
  if (!spawner.ok()) {
    LogError("cannot start the spawner", {{"error", spawner.status().message()}});
    return 1;
  }
  // Large buffers (session files, job output, results) are made and dropped per operation: kept
  // in the heap (common/heap.h). After the spawner is forked, which keeps glibc's defaults.
  KeepLargeBuffersInHeap();
  for (size_t k = 0; k < builds.size(); ++k) {
    const Build& b = builds[k];
    const TemplateConfig& t = config.templates[b.tmpl];
    uint32_t slot = b.slot;
    uint32_t job_uid = t.sandbox.layer_owner_base + 1;
    LogInfo("building template layer", {{"template", t.name}, {"dir", b.dir}});
    std::string script = "set -e\n";
    for (const std::string& line : t.setup) script += line + "\n";
    Channel ch(UniqueFd(::fcntl(spawner->channel.get(), F_DUPFD_CLOEXEC, 3)));
    Status st = PrepareLayerDir(t.sandbox.layer_host_dir, job_uid);
    if (st.ok()) st = RunLayerBuild(ch, b.config_index, slot, script, config.setup_timeout_ms);
    if (!st.ok()) {
      LogError("template setup failed: not starting", {{"template", t.name}, {"error", st.message()}});
      std::fprintf(stderr, "sandpoold: template '%s': %s\n", t.name.c_str(), st.message().c_str());
      ::kill(spawner->pid, SIGKILL);
      return 1;
    }
    UniqueFd done(::open((b.dir + "/complete").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    LogInfo("template layer built", {{"template", t.name}});
  }

  struct event_base* base = event_base_new();
  int code;
  {
    Daemon daemon(config, base, std::move(spawner.value()), *layout);
    daemon.SetNetwork(&network.value());
    daemon.SetNotifier(notify->get());
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
  network->flusher.reset();  // its thread ends; its events live on the base
  network->dns.reset();      // its events and libunbound's live on the base
  notify->reset();           // its watchdog timer too
  event_base_free(base);
  return code;
}
