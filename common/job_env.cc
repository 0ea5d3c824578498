#include "common/job_env.h"

#include <set>

namespace sandpool {
namespace {

std::string_view NameOf(std::string_view entry) { return entry.substr(0, entry.find('=')); }

}  // namespace

std::string_view DefaultPath() { return std::string_view(kDefaultJobEnv[0]).substr(5); }

std::vector<std::string> JobEnvironment(const std::vector<std::pair<std::string, std::string>>& job_env,
                                        const std::vector<std::string>& template_env) {
  std::vector<std::string> env;
  std::set<std::string_view> names;
  for (const auto& [k, v] : job_env) {
    env.push_back(k + "=" + v);
    names.insert(k);
  }
  auto add = [&](std::string_view entry) {
    if (names.insert(NameOf(entry)).second) env.emplace_back(entry);
  };
  for (const std::string& e : template_env) add(e);
  for (const char* e : kDefaultJobEnv) add(e);
  return env;
}

}  // namespace sandpool
