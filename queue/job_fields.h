// The fields of a job map, for decoders of maps that carry them too (a session's exec request,
// PROTOCOL.md section 15): one set of names and one validation, the job map's (job_decode.cc).
#pragma once

#include <msgpack.hpp>

#include <optional>
#include <string_view>

#include "queue/protocol.h"

namespace sandpool {

// Validates field `name` of a job map into `spec` (PROTOCOL.md section 3). *known is false when
// no job field has that name (then nothing is done). `v` and `id` are the caller's to handle.
// The caller applies the defaults DecodeJob applies for absent fields (DefaultJobLimits).
std::optional<JobError> DecodeJobField(std::string_view name, const msgpack::object& value, const ServerLimits& limits,
                                       JobSpec& spec, bool* known);

// What DecodeJob does for a job that names no timeout or output cap.
void DefaultJobLimits(JobSpec& spec, const ServerLimits& limits, bool has_timeout, bool has_max_output);

}  // namespace sandpool
