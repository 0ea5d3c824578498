#include "worker/keeper/template_build.h"

#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "common/clock.h"
#include "common/job_env.h"
#include "common/runtimes.h"
#include "worker/ipc/messages.h"
#include "worker/sandbox/mount_util.h"
#include "worker/sandbox/rootfs.h"

namespace sandpool {

std::string LayerHash(const std::vector<std::string>& parts) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const std::string& s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ull;
    }
  };
  for (const std::string& p : parts) {
    mix(std::to_string(p.size()) + ":");
    mix(p);
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Status PrepareLayerDir(const std::string& layer_dir, uint32_t uid) {
  struct stat st;
  if (::lstat(layer_dir.c_str(), &st) == 0) {
    std::string aside = layer_dir + ".failed-" + std::to_string(WallMs());
    if (::rename(layer_dir.c_str(), aside.c_str()) != 0) return ErrnoStatus("rename " + layer_dir);
  }
  SP_RETURN_IF_ERROR(MkdirP(layer_dir.substr(0, layer_dir.rfind('/')), 0755));
  if (::mkdir(layer_dir.c_str(), 0755) != 0) return ErrnoStatus("mkdir " + layer_dir);
  if (::chown(layer_dir.c_str(), uid, uid) != 0) return ErrnoStatus("chown " + layer_dir);
  return Status::Ok();
}

Status RunLayerBuild(Channel& spawner, uint32_t template_index, uint32_t slot, const std::string& script,
                     uint64_t timeout_ms) {
  SP_RETURN_IF_ERROR(spawner.Send(static_cast<uint16_t>(MsgType::kSpawnKeeper), Encode(SpawnKeeperMsg{slot, template_index})));
  auto kf = spawner.Receive();
  if (!kf.ok()) return kf.status().Prefixed("spawner");
  if (kf->type != static_cast<uint16_t>(MsgType::kKeeper) || kf->fds.size() != 2) return Status::Error("spawner: unexpected reply");
  Channel keeper(std::move(kf->fds[0]));

  // Ready (or the keeper's set-up failure).
  Frame ready;
  for (;;) {
    auto f = keeper.Receive();
    if (!f.ok()) return f.status().Prefixed("build keeper");
    if (f->type == static_cast<uint16_t>(MsgType::kFailed)) {
      FailedMsg m;
      (void)Decode(f->payload, &m);
      return Status::Error("build sandbox: " + m.message);
    }
    if (f->type == static_cast<uint16_t>(MsgType::kReady) && f->fds.size() == 3) {
      ready = std::move(*f);
      break;
    }
  }
  ReadyMsg r;
  SP_RETURN_IF_ERROR(Decode(ready.payload, &r));
  ready.fds[0].reset();  // no stdin
  RunMsg run;
  run.generation = r.generation;
  run.kind = "shell";
  run.code = script;
  run.argv = SourceArgv(*FindRuntime("sh"), script);
  run.env = JobEnvironment({}, {});
  run.cwd = "/work";
  SP_RETURN_IF_ERROR(keeper.Send(static_cast<uint16_t>(MsgType::kRun), Encode(run)));

  // Collect output (both streams, interleaved as read) until the sandbox is gone.
  std::string output;
  ExitedMsg exited;
  bool have_exited = false;
  int64_t deadline = MonotonicUs() + static_cast<int64_t>(timeout_ms) * 1000;
  bool open[2] = {true, true};
  while (!have_exited || open[0] || open[1]) {
    struct pollfd p[3] = {{keeper.fd(), POLLIN, 0},
                          {open[0] ? ready.fds[1].get() : -1, POLLIN, 0},
                          {open[1] ? ready.fds[2].get() : -1, POLLIN, 0}};
    int left = static_cast<int>((deadline - MonotonicUs()) / 1000);
    if (left <= 0) {
      (void)keeper.Send(static_cast<uint16_t>(MsgType::kKill), Encode(GenerationMsg{r.generation}));
      return Status::Error("template setup timed out after " + std::to_string(timeout_ms) + " ms; output:\n" + output);
    }
    if (::poll(p, 3, left) < 0 && errno != EINTR) return ErrnoStatus("poll");
    for (int i = 0; i < 2; ++i) {
      if (!p[i + 1].revents) continue;
      char buf[4096];
      ssize_t n = ::read(ready.fds[i + 1].get(), buf, sizeof buf);
      if (n <= 0) open[i] = false;
      else if (output.size() < (64u << 10)) output.append(buf, static_cast<size_t>(n));
    }
    if (p[0].revents) {
      auto f = keeper.Receive();
      if (!f.ok()) return f.status().Prefixed("build keeper");
      if (f->type == static_cast<uint16_t>(MsgType::kExited)) {
        SP_RETURN_IF_ERROR(Decode(f->payload, &exited));
        have_exited = true;
      }
    }
  }
  if (!exited.have_status || !WIFEXITED(exited.wait_status) || WEXITSTATUS(exited.wait_status) != 0) {
    std::string how = !exited.have_status ? "the build sandbox died"
                      : WIFEXITED(exited.wait_status) ? "exit " + std::to_string(WEXITSTATUS(exited.wait_status))
                                                      : "signal " + std::to_string(WTERMSIG(exited.wait_status));
    if (output.size() > 4000) output = "..." + output.substr(output.size() - 4000);
    return Status::Error("template setup failed (" + how + "); output:\n" + output);
  }
  return Status::Ok();
}

}  // namespace sandpool
