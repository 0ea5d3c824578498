// Admission: from a stream entry to a job that can be claimed and the template it runs in, or to
// the reason it cannot run (PROTOCOL.md sections 2, 3 and 8). Pure: no I/O, no state.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>

#include "queue/protocol.h"
#include "scheduler/config/config.h"
#include "scheduler/config/egress_policy.h"

namespace sandpool {

// One entry as read from a queue stream.
struct StreamEntry {
  std::string stream;  // the key it was read from (the intake queue or a forward queue)
  std::string id;      // stream entry id
  bool deleted = false;  // XDEL'd while pending: nothing to run
  std::map<std::string, std::string> fields;
  int64_t waiting_since_us = 0;  // set when it first found its template's pool empty
  // Read ahead of a ready slot, for one whose sandbox was being prepared (StreamReader::
  // CarryRead): waiting for that sandbox is the plan, not a miss.
  bool read_ahead = false;
  // Waiting behind entries its daemon forwarded (Daemon::forwarded_): they get the template's
  // sandboxes first.
  bool behind_forwarded = false;
};

// A job naming a template this daemon has not configured: a snapshot's name, perhaps (PROTOCOL.md
// section 18); Sessions::RunJob decides (it needs Redis to know).
inline constexpr uint32_t kUnconfiguredTemplate = UINT32_MAX;

struct Admitted {
  JobSpec spec;
  uint32_t template_index = 0;  // or kUnconfiguredTemplate
  // Network templates: the job's effective egress policy, and whether it is narrower than the
  // template's (then its slot is narrowed while it runs: Network::Narrow).
  std::optional<EgressPolicy> egress;
  bool narrowed = false;
  int64_t enqueued_ms = 0;  // when it was first queued (the entry id's time, or enqueued_ms)
};

struct Rejection {
  std::string job_id;  // the id the error result is stored under (entry-<id> if unusable)
  ErrorCode code;
  std::string message;
  bool dead_letter;  // the raw entry also goes to the dead-letter stream
};

std::variant<Admitted, Rejection> Admit(const StreamEntry& e, const DaemonConfig& config);

// The notify target of an entry (queue/protocol.h EntryNotifyTarget), "" when it names none or
// an invalid one (Admit rejects those).
std::string NotifyTargetOf(const std::map<std::string, std::string>& fields);

// The template a valid job runs in (PROTOCOL.md section 3), or -1 for an unknown name.
int TemplateFor(const JobSpec& spec, const DaemonConfig& config);

// The wall-clock milliseconds a stream entry id carries.
int64_t EntryMs(const std::string& entry_id);
// Whether stream entry id `a` ("ms-seq") comes before `b` in their stream, as Redis orders them.
bool EntryIdBefore(const std::string& a, const std::string& b);

}  // namespace sandpool
