// libFuzzer harness: ParseConfig (scheduler/config/config.h) reading the input as its --config file.
// The file is a memfd named by /proc/self/fd/N, so no file is written per input. SANDPOOL_*
// variables would override the file's options: they are removed from the environment first.
// ParseConfig stats `root` paths and checks the interpreters with access(): both only read.
// Properties, beyond "no crash, leak or UBSan report":
//  - --config alone never means "exit now" (only --help does), and an error says why;
//  - an accepted configuration satisfies every rule ParseConfig states in its error messages
//    (checked here again, from the finished DaemonConfig) and has usable templates: "default"
//    first, unique valid names, known runtimes, max_workers >= min_workers.
//
// Found and fixed (regressions/config/): the check lease-ms >= 3 x heartbeat-ms wrapped in 64 bits.
#include <sys/mman.h>
#include <unistd.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "common/runtimes.h"
#include "scheduler/config/config.h"
#include "tests/fuzz/fuzz_check.h"

extern char** environ;

namespace sandpool {
namespace {

int g_config_fd = -1;
std::string g_config_path;

void CheckAccepted(const DaemonConfig& c) {
  const ServerLimits& l = c.limits;
  FUZZ_CHECK(c.workers >= 1 && c.workers <= 4096, "--workers must be in 1..4096");
  FUZZ_CHECK(l.default_timeout_ms >= 1 && l.default_timeout_ms <= l.max_timeout_ms,
             "--default-timeout-ms must be in 1..max-timeout-ms");
  FUZZ_CHECK(l.default_output_bytes <= l.max_output_bytes,
             "--default-output-bytes must be at most --max-output-bytes");
  // Divided, not multiplied: the rule is about the numbers, not their product modulo 2^64.
  FUZZ_CHECK(c.heartbeat_ms != 0 && c.lease_ms / 3 >= c.heartbeat_ms,
             "--lease-ms must be at least 3 x --heartbeat-ms");
  FUZZ_CHECK(c.sandbox.cgroup.memory_bytes <= l.max_memory_bytes, "--memory at most --max-memory");
  FUZZ_CHECK(c.sandbox.cgroup.pids <= l.max_pids, "--pids at most --max-pids");
  FUZZ_CHECK(c.sandbox.cpu_time_ms <= l.max_cpu_time_ms, "--cpu-time-ms at most --max-cpu-time-ms");
  FUZZ_CHECK(c.sandbox.host_id_base >= 1, "uid-base is never 0");
  FUZZ_CHECK(ParseRedisUrl(c.redis_url).ok(), "--redis parses");
  FUZZ_CHECK(!c.consumer.empty(), "a consumer name");
  for (char ch : c.consumer) {
    FUZZ_CHECK(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.',
               "--consumer may contain only letters, digits, '-', '_' and '.'");
  }

  FUZZ_CHECK(!c.templates.empty() && c.templates[0].name == "default", "templates[0] is default");
  std::set<std::string> names;
  uint64_t min_total = 0;
  for (const TemplateConfig& t : c.templates) {
    FUZZ_CHECK(ValidTemplateName(t.name), "template names are valid");
    FUZZ_CHECK(names.insert(t.name).second, "template names are unique");
    FUZZ_CHECK(t.sandbox.template_name == t.name, "a template's sandbox knows its name");
    FUZZ_CHECK(t.max_workers >= t.min_workers, "max-workers >= workers");
    FUZZ_CHECK(t.sandbox.runtime.empty() || FindRuntime(t.sandbox.runtime) != nullptr,
               "a template's runtime is known");
    FUZZ_CHECK(t.sandbox.cgroup.memory_bytes <= l.max_memory_bytes,
               "a template's memory is at most --max-memory");
    min_total += t.min_workers;
  }
  FUZZ_CHECK(min_total <= c.max_sandboxes, "the templates' workers fit --max-sandboxes");
  FUZZ_CHECK(uint64_t{c.sandbox.host_id_base} + 2ull * (c.max_sandboxes + c.templates.size()) <=
                 4294967294ull,
             "--uid-base leaves room for the slots' uids");
}

}  // namespace
}  // namespace sandpool

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::vector<std::string> ours;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "SANDPOOL_", 9) == 0) ours.emplace_back(*e, std::strcspn(*e, "="));
  }
  for (const std::string& name : ours) ::unsetenv(name.c_str());
  sandpool::g_config_fd = ::memfd_create("sandpool-fuzz.conf", MFD_CLOEXEC);
  if (sandpool::g_config_fd < 0) {
    std::perror("memfd_create");
    std::abort();
  }
  sandpool::g_config_path = "/proc/self/fd/" + std::to_string(sandpool::g_config_fd);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandpool;
  if (::ftruncate(g_config_fd, 0) != 0 ||
      ::pwrite(g_config_fd, data, size, 0) != static_cast<ssize_t>(size)) {
    std::perror("writing the memfd");
    std::abort();
  }
  std::string flag = "--config";
  std::vector<char*> argv = {const_cast<char*>("sandpoold"), flag.data(), g_config_path.data(),
                             nullptr};
  DaemonConfig config;
  bool exit_now = true;
  Status s = ParseConfig(3, argv.data(), &config, &exit_now);
  FUZZ_CHECK(!exit_now, "only --help means exit now");
  if (!s.ok()) {
    FUZZ_CHECK(!s.message().empty(), "a refusal says why");
    return 0;
  }
  CheckAccepted(config);
  return 0;
}
