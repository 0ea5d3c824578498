// libFuzzer harness: DecodeResult and DecodeEvent (queue/protocol.h), what every client decodes
// from Redis (results under sandpool:result:<id>, live events on sandpool:out:<id>). Both run on
// every input. Properties, beyond "no crash, leak or UBSan report":
//  - a result that decodes, re-encoded with EncodeResult, decodes to the same result, and
//    encodes to the same bytes again;
//  - an event that decodes, re-encoded with the encoder of its type (EncodeExitedEvent,
//    EncodeStartedEvent, EncodeOutputEvent), decodes to the same event;
//  - an exited event always carries a result; an output event its data's stream name.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "queue/protocol.h"
#include "tests/fuzz/fuzz_check.h"

namespace sandpool {
namespace {

bool SameError(const std::optional<JobError>& a, const std::optional<JobError>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || (a->code == b->code && a->message == b->message);
}

bool SameResult(const JobResult& a, const JobResult& b) {
  return a.id == b.id && a.outcome == b.outcome && a.exit_code == b.exit_code &&
         a.signal == b.signal && a.timed_out == b.timed_out && a.killed == b.killed &&
         a.stdout_data == b.stdout_data && a.stderr_data == b.stderr_data &&
         a.stdout_truncated == b.stdout_truncated && a.stderr_truncated == b.stderr_truncated &&
         a.stdout_dropped_bytes == b.stdout_dropped_bytes &&
         a.stderr_dropped_bytes == b.stderr_dropped_bytes && a.exec_time_us == b.exec_time_us &&
         a.cpu_time_us == b.cpu_time_us && a.peak_memory_bytes == b.peak_memory_bytes &&
         a.queue_wait_us == b.queue_wait_us && a.worker == b.worker && a.attempt == b.attempt &&
         SameError(a.error, b.error);
}

void CheckResult(std::string_view bytes) {
  std::optional<JobResult> r = DecodeResult(bytes);
  if (!r) return;
  std::string encoded = EncodeResult(*r);
  std::optional<JobResult> r2 = DecodeResult(encoded);
  FUZZ_CHECK(r2.has_value(), "a decoded result re-encoded decodes");
  FUZZ_CHECK(SameResult(*r, *r2), "a decoded result re-encoded decodes to the same result");
  FUZZ_CHECK(EncodeResult(*r2) == encoded, "EncodeResult is deterministic");
}

void CheckEvent(std::string_view bytes) {
  std::optional<Event> ev = DecodeEvent(bytes);
  if (!ev) return;
  std::string encoded;
  if (ev->type == "exited") {
    FUZZ_CHECK(ev->result.has_value(), "an exited event carries its result");
    encoded = EncodeExitedEvent(ev->seq, *ev->result);
  } else if (ev->type == "started") {
    encoded = EncodeStartedEvent(ev->seq, ev->worker, ev->attempt);
  } else if (ev->type == "stdout" || ev->type == "stderr") {
    encoded = EncodeOutputEvent(ev->seq, ev->type, ev->data);
  } else {
    return;  // a newer daemon's event type: clients skip it, and nothing encodes it
  }
  std::optional<Event> ev2 = DecodeEvent(encoded);
  FUZZ_CHECK(ev2.has_value(), "a decoded event re-encoded decodes");
  FUZZ_CHECK(ev2->type == ev->type && ev2->seq == ev->seq, "same type and seq");
  if (ev->type == "exited") {
    FUZZ_CHECK(ev2->result && SameResult(*ev->result, *ev2->result), "same result");
  } else if (ev->type == "started") {
    FUZZ_CHECK(ev2->worker == ev->worker && ev2->attempt == ev->attempt, "same worker, attempt");
  } else {
    FUZZ_CHECK(ev2->data == ev->data, "same output data");
  }
}

}  // namespace
}  // namespace sandpool

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  sandpool::CheckResult(bytes);
  sandpool::CheckEvent(bytes);
  return 0;
}
