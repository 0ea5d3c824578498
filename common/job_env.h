// A job's environment (PROTOCOL.md section 3): exactly the variables it asked for, then its
// template's, then the safe defaults, each name once. The one place these defaults are written.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sandpool {

// What every job has unless it (or its template) sets the name: "NAME=value".
inline constexpr const char* kDefaultJobEnv[] = {
    "PATH=/usr/local/bin:/usr/bin:/bin",
    "HOME=/work",
    "LANG=C.UTF-8",
};

// The value of PATH in kDefaultJobEnv (where argv[0] is searched when the job sets no PATH).
std::string_view DefaultPath();

// The job's own variables (in the order given), then each of `template_env` ("NAME=value")
// whose name the job did not set, then each default whose name neither set.
std::vector<std::string> JobEnvironment(const std::vector<std::pair<std::string, std::string>>& job_env,
                                        const std::vector<std::string>& template_env);

}  // namespace sandpool
