// libFuzzer harness: the Decode(std::string_view, XxxMsg*) overloads of worker/ipc/messages.h, the
// payloads of the frames between the scheduler, the spawner and the keepers. Every input goes to
// all seven decoders (a frame's type picks one, and a peer may send any payload with any type).
// Properties, beyond "no crash, leak or UBSan report" and "never throws" (messages.h: a bad
// payload is an error Status):
//  - a payload that decodes, re-encoded with Encode, decodes to the same message, and encodes to
//    the same bytes again.
//
// Found and fixed (regressions/messages/): a 5-byte payload asked msgpack for 256 GiB; Decode
// now unpacks with limits.
#include <msgpack.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tests/fuzz/fuzz_check.h"
#include "worker/ipc/messages.h"

namespace sandpool {
namespace {

bool Same(const ReadyMsg& a, const ReadyMsg& b) {
  return a.generation == b.generation && a.prepare_us == b.prepare_us;
}
bool Same(const RunMsg& a, const RunMsg& b) {
  return a.generation == b.generation && a.kind == b.kind && a.code == b.code &&
         a.argv == b.argv && a.env == b.env && a.cwd == b.cwd && a.cpu_time_ms == b.cpu_time_ms &&
         a.memory_bytes == b.memory_bytes && a.pids == b.pids &&
         a.file_size_bytes == b.file_size_bytes && a.open_files == b.open_files;
}
bool Same(const ExitedMsg& a, const ExitedMsg& b) {
  return a.generation == b.generation && a.have_status == b.have_status &&
         a.wait_status == b.wait_status && a.exec_errno == b.exec_errno &&
         a.exec_stage == b.exec_stage && a.started == b.started && a.killed == b.killed &&
         a.cpu_limit == b.cpu_limit && a.cpu_time_us == b.cpu_time_us &&
         a.peak_memory_bytes == b.peak_memory_bytes && a.oom_kills == b.oom_kills &&
         a.pids_max_hits == b.pids_max_hits && a.disk_full == b.disk_full &&
         a.exec_time_us == b.exec_time_us;
}
bool Same(const GenerationMsg& a, const GenerationMsg& b) { return a.generation == b.generation; }
bool Same(const FailedMsg& a, const FailedMsg& b) { return a.message == b.message; }
bool Same(const SpawnKeeperMsg& a, const SpawnKeeperMsg& b) {
  return a.slot == b.slot && a.template_index == b.template_index;
}
bool Same(const KeeperMsg& a, const KeeperMsg& b) { return a.slot == b.slot && a.pid == b.pid; }

template <typename M>
void Check(std::string_view bytes) {
  M m;
  if (!Decode(bytes, &m).ok()) return;
  std::string encoded = Encode(m);
  M m2;
  Status s = Decode(encoded, &m2);
  FUZZ_CHECK(s.ok(), "a decoded message re-encoded decodes");
  FUZZ_CHECK(Same(m, m2), "a decoded message re-encoded decodes to the same message");
  FUZZ_CHECK(Encode(m2) == encoded, "Encode is deterministic");
}

}  // namespace
}  // namespace sandpool

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandpool;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Check<ReadyMsg>(bytes);
  Check<RunMsg>(bytes);
  Check<ExitedMsg>(bytes);
  Check<GenerationMsg>(bytes);
  Check<FailedMsg>(bytes);
  Check<SpawnKeeperMsg>(bytes);
  Check<KeeperMsg>(bytes);
  return 0;
}
