#include "common/runtimes.h"

#include <algorithm>

namespace sandpool {

std::vector<std::string> SourceArgv(const RuntimeInfo& r, const std::string& source) {
  if (source.size() < kMaxExecString) return {r.interpreter, r.code_flag, source};
  if (!r.shell) return {};
  // The pieces become $1 .. $n; the prologue joins them, clears them, forgets its own variables
  // and evaluates the whole. eval expands "unset __sp_s; $__sp_s" before it runs any of it.
  std::vector<std::string> argv = {
      r.interpreter, r.code_flag,
      "__sp_s=; for __sp_p do __sp_s=$__sp_s$__sp_p; done; unset __sp_p; set --; eval \"unset __sp_s; $__sp_s\"",
      std::string(r.name)};
  for (size_t off = 0; off < source.size(); off += kMaxExecString - 1) {
    argv.push_back(source.substr(off, std::min(kMaxExecString - 1, source.size() - off)));
  }
  return argv;
}

}  // namespace sandpool
