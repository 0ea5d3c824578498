#include "scheduler/sessions/op_answers.h"

#include "common/clock.h"
#include "queue/msgpack_read.h"
#include "scheduler/jobs/claim_settle.h"

namespace sandpool {

bool IsCommandOp(SessionOp op) { return op == SessionOp::kExec || op == SessionOp::kCode; }

void OpAnswers::Op(const SessionOpEntry& op, OpAnswer answer) {
  OpResult res;
  res.id = op.req.id;
  res.op = std::string(SessionOpOf(op.req.op).name);
  res.session = op.req.session;
  res.error = std::move(answer.error);
  res.value = std::move(answer.value);
  if (!res.error && !res.value.empty()) {
    mpk::Parsed p = mpk::ParseOne(res.value, mpk::TolerantLimit());
    if (p.fail != mpk::ParseFail::kNone || p.handle.get().type != msgpack::type::MAP) {
      res.value.clear();
      res.error = JobError{ErrorCode::kInternal, "the session's agent gave a malformed answer"};
    }
  }
  metrics_->SessionOp(res.op, res.error ? ErrorCodeName(res.error->code) : "ok",
                      static_cast<double>(MonotonicUs() - op.received_us) / 1e6);
  EncodedOpAnswer answer_bytes = EncodeOpAnswer(res);
  ledger_->FinishEncoded(res.id, op.attempt, std::move(answer_bytes.result), std::move(answer_bytes.event), op.stream,
                         op.entry);
}

void OpAnswers::Command(const SessionOpEntry& op, JobResult&& r, uint64_t seq) {
  r.id = op.req.id;
  r.attempt = op.attempt;
  r.worker = config_.consumer;
  metrics_->SessionOp(SessionOpOf(op.req.op).name, r.error ? ErrorCodeName(r.error->code) : OutcomeName(r.outcome),
                      static_cast<double>(MonotonicUs() - op.received_us) / 1e6);
  ledger_->FinishEncoded(r.id, op.attempt, EncodeResult(r), EncodeExitedEvent(seq, r), op.stream, op.entry);
}

void OpAnswers::Error(const SessionOpEntry& op, ErrorCode code, std::string message) {
  if (IsCommandOp(op.req.op)) {
    Command(op, ErrorResult(op.req.id, op.attempt, JobError{code, std::move(message)}), 0);
    return;
  }
  Op(op, OpAnswer::Error(code, std::move(message)));
}

void OpAnswers::Entry(const std::string& stream, const std::string& entry,
                      const std::map<std::string, std::string>& fields, ErrorCode code, const std::string& message) {
  auto id_it = fields.find("id");
  std::string id = id_it != fields.end() && ValidJobId(id_it->second) ? id_it->second : "entry-" + entry;
  // What the op was, if that much can be read: its answer takes that op's form.
  std::string op_name, sid;
  auto req_it = fields.find("req");
  if (req_it != fields.end()) {
    try {
      mpk::Parsed p = mpk::ParseOne(req_it->second, mpk::TolerantLimit());
      if (p.fail == mpk::ParseFail::kNone && p.handle.get().type == msgpack::type::MAP) {
        const auto& m = p.handle.get().via.map;
        for (uint32_t i = 0; i < m.size; ++i) {
          if (!mpk::IsStr(m.ptr[i].key)) continue;
          std::string_view k = mpk::StrOf(m.ptr[i].key);
          if (k == "op") mpk::GetStr(m.ptr[i].val, &op_name);
          if (k == "session") mpk::GetStr(m.ptr[i].val, &sid);
        }
      }
    } catch (...) {
    }
  }
  const SessionOpInfo* info = FindSessionOp(op_name);
  std::string result, event;
  if (info != nullptr && !IsCommandOp(info->op)) {
    OpResult r;
    r.id = id;
    r.op = op_name;
    r.session = ValidJobId(sid) ? sid : "";
    r.error = JobError{code, message};
    EncodedOpAnswer bytes = EncodeOpAnswer(r);
    result = std::move(bytes.result);
    event = std::move(bytes.event);
  } else {
    JobResult r = ErrorResult(id, 0, JobError{code, message});  // never claimed: attempt 0
    r.worker = config_.consumer;
    result = EncodeResult(r);
    event = EncodeExitedEvent(0, r);
  }
  metrics_->SessionOp(info ? info->name : "unknown", ErrorCodeName(code), 0);
  ledger_->Answer(id, stream, entry, result, event);
}

}  // namespace sandpool
