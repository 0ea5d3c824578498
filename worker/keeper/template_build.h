// Building a template's layer: its setup commands run once, in a real sandbox (same namespaces,
// limits and seccomp filter as jobs, no network), as the job user, with the layer's host
// directory mounted writable at the layer mount point. Driven synchronously from sandpoold's
// main() through the spawner, before the daemon serves anything, so a broken setup stops
// start-up with its output instead of failing the first job.
//
// Layers live in <state-dir>/templates/<name>-<hash>/layer, where the hash covers everything
// that defines the layer; a layer is reused while <...>/complete exists. The host side never
// reads or deletes what a setup wrote: a failed layer directory is renamed aside, not removed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/ipc/channel.h"

namespace sandpool {

// 16 hex digits (FNV-1a 64) of the parts, each length-prefixed.
std::string LayerHash(const std::vector<std::string>& parts);

// Creates (or moves a previous failed attempt out of) `layer_dir`, owned by `uid`:`uid`.
Status PrepareLayerDir(const std::string& layer_dir, uint32_t uid);

// Asks the spawner for a keeper of template `template_index` in `slot`, runs `script` with
// /bin/sh -c in its sandbox, and waits up to `timeout_ms`. OK only if it exited 0; otherwise the
// error carries the tail of its output.
Status RunLayerBuild(Channel& spawner, uint32_t template_index, uint32_t slot, const std::string& script,
                     uint64_t timeout_ms);

}  // namespace sandpool
