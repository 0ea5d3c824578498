#include "scheduler/jobs/intake.h"

#include <cstdlib>
#include <utility>

#include "common/runtimes.h"

namespace sandpool {

int64_t EntryMs(const std::string& entry_id) { return std::strtoll(entry_id.c_str(), nullptr, 10); }

bool EntryIdBefore(const std::string& a, const std::string& b) {
  auto parse = [](const std::string& id) {
    char* end = nullptr;
    unsigned long long ms = std::strtoull(id.c_str(), &end, 10);
    unsigned long long seq = *end == '-' ? std::strtoull(end + 1, nullptr, 10) : 0;
    return std::pair<unsigned long long, unsigned long long>(ms, seq);
  };
  return parse(a) < parse(b);
}

namespace {

std::variant<std::string, JobError> EntryTarget(const std::map<std::string, std::string>& fields) {
  auto n = fields.find("notify"), r = fields.find("notify_result");
  return EntryNotifyTarget(n != fields.end() ? n->second : "", r != fields.end() ? r->second : "", n != fields.end(),
                           r != fields.end());
}

}  // namespace

std::string NotifyTargetOf(const std::map<std::string, std::string>& fields) {
  auto t = EntryTarget(fields);
  return std::holds_alternative<std::string>(t) ? std::get<std::string>(t) : std::string();
}

int TemplateFor(const JobSpec& spec, const DaemonConfig& config) {
  if (!spec.template_name.empty()) return FindTemplate(config, spec.template_name);
  if (spec.code) {
    // The template named after the runtime, else any template that keeps it warm.
    int named = FindTemplate(config, spec.runtime);
    if (named >= 0 && config.templates[static_cast<size_t>(named)].sandbox.runtime == spec.runtime) return named;
    for (size_t i = 0; i < config.templates.size(); ++i) {
      if (config.templates[i].sandbox.runtime == spec.runtime) return static_cast<int>(i);
    }
  }
  return 0;  // "default"
}

std::variant<Admitted, Rejection> Admit(const StreamEntry& e, const DaemonConfig& config) {
  auto id_field = e.fields.find("id");
  std::string job_id = id_field != e.fields.end() ? id_field->second : "";
  bool id_ok = ValidJobId(job_id);
  if (!id_ok) job_id = "entry-" + e.id;
  size_t total = 0;
  for (const auto& [k, v] : e.fields) total += k.size() + v.size();
  if (total > config.max_payload_bytes) {
    return Rejection{job_id, ErrorCode::kTooLarge,
                     "stream entry is " + std::to_string(total) + " bytes; the limit is " +
                         std::to_string(config.max_payload_bytes),
                     true};
  }
  auto job = e.fields.find("job");
  if (job == e.fields.end()) return Rejection{job_id, ErrorCode::kBadPayload, "stream entry has no 'job' field", true};
  if (!id_ok) {
    return Rejection{job_id, ErrorCode::kBadField,
                     "the entry's 'id' field is missing or not a valid job id (PROTOCOL.md section 1)", true};
  }
  auto decoded = DecodeJob(job->second, config.limits);
  if (auto* err = std::get_if<JobError>(&decoded)) {
    return Rejection{job_id, err->code, err->message, err->code == ErrorCode::kBadPayload};
  }
  Admitted a;
  a.spec = std::move(std::get<JobSpec>(decoded));
  if (a.spec.id != job_id) {
    return Rejection{job_id, ErrorCode::kBadField,
                     "the payload's id '" + a.spec.id + "' differs from the entry's id field", false};
  }
  auto target = EntryTarget(e.fields);
  if (auto* err = std::get_if<JobError>(&target)) return Rejection{job_id, err->code, err->message, false};
  if (!std::get<std::string>(target).empty() && a.spec.version < 4) {
    // An older daemon would ignore the field and the client would wait for a record forever: the
    // protocol has clients send v 4, which such a daemon rejects (bad_version).
    return Rejection{job_id, ErrorCode::kBadField, "notify: needs a job map of v 4 (PROTOCOL.md section 21)", false};
  }
  int tmpl = TemplateFor(a.spec, config);
  auto enq = e.fields.find("enqueued_ms");
  a.enqueued_ms = enq != e.fields.end() ? std::strtoll(enq->second.c_str(), nullptr, 10) : EntryMs(e.id);
  if (tmpl < 0) {
    if (a.spec.egress) {
      // A snapshot's job runs through a session of its base template, which does not narrow
      // for it yet: refused rather than run wider than asked.
      return Rejection{job_id, ErrorCode::kBadField,
                       "egress: not supported for jobs on snapshot templates ('" + a.spec.template_name + "')", false};
    }
    a.template_index = kUnconfiguredTemplate;
    return a;
  }
  a.template_index = static_cast<uint32_t>(tmpl);
  const TemplateConfig& t = config.templates[a.template_index];
  if (t.network) {
    auto eff = EffectiveEgress(t.egress, t.name, a.spec.egress);
    if (!eff.ok()) return Rejection{job_id, ErrorCode::kBadField, eff.status().message(), false};
    a.narrowed = !(*eff == t.egress);
    a.egress = std::move(eff.value());
  } else if (a.spec.egress) {
    return Rejection{job_id, ErrorCode::kBadField, "egress: template '" + t.name + "' has no network", false};
  }
  if (a.spec.code && a.spec.runtime != t.sandbox.runtime && SourceArgv(*FindRuntime(a.spec.runtime), *a.spec.code).empty()) {
    return Rejection{job_id, ErrorCode::kTooLarge,
                     "code: " + std::to_string(a.spec.code->size()) + " bytes of " + a.spec.runtime + " in template '" +
                         t.name + "', which does not keep " + a.spec.runtime +
                         " warm, must go on a command line (at most " + std::to_string(kMaxExecString - 1) + " bytes)",
                     false};
  }
  return a;
}

}  // namespace sandpool
