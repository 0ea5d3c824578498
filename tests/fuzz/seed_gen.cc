// Writes the binary seeds of the fuzz corpora: the test vectors of docs/PROTOCOL.md section 11,
// and what the project's own encoders make of realistic jobs, results, events and keeper
// messages (the same calls the daemon, the keeper and the clients make). The text seeds
// (configs, sizes, URLs) are plain files under corpus/ and are not written here.
//   fuzz_seed_gen tests/fuzz/corpus     (then commit what changed)
// Deterministic: the same tree writes the same bytes.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "queue/protocol.h"
#include "worker/ipc/channel.h"
#include "worker/ipc/messages.h"

namespace sandpool {
namespace {

std::filesystem::path g_root;

void Write(const std::string& corpus, const std::string& name, std::string_view bytes) {
  std::filesystem::create_directories(g_root / corpus);
  std::ofstream f(g_root / corpus / name, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) {
    std::fprintf(stderr, "cannot write %s/%s\n", corpus.c_str(), name.c_str());
    std::exit(1);
  }
}

std::string FromHex(std::string_view hex) {
  std::string out;
  int nibbles = 0, byte = 0;
  for (char c : hex) {
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) continue;  // spaces and line breaks, as PROTOCOL.md prints them
    byte = byte * 16 + v;
    if (++nibbles % 2 == 0) {
      out += static_cast<char>(byte);
      byte = 0;
    }
  }
  return out;
}

void ProtocolVectors() {
  // PROTOCOL.md section 11, byte for byte: two jobs that decode, five that are refused.
  Write("job", "protocol-11-t1-shell", FromHex("83 a1 76 01 a2 69 64 a2 74 31 a5 73 68 65 6c 6c a7 65 63 68 6f 20 68 69"));
  Write("job", "protocol-11-t2-argv-env-timeout",
        FromHex("85 a1 76 01 a2 69 64 a2 74 32 a4 61 72 67 76 92 a9 2f 62 69 6e 2f 65 63"
                "68 6f a3 61 20 62 a3 65 6e 76 81 a1 58 a1 31 aa 74 69 6d 65 6f 75 74 5f"
                "6d 73 cd 13 88"));
  Write("job", "protocol-11-reject-c1", FromHex("c1"));
  Write("job", "protocol-11-reject-not-a-map", FromHex("93 01 02 03"));
  Write("job", "protocol-11-reject-v2", FromHex("82 a1 76 02 a2 69 64 a2 74 33"));
  Write("job", "protocol-11-reject-shell-int", FromHex("83 a1 76 01 a2 69 64 a2 74 34 a5 73 68 65 6c 6c 2a"));
  Write("job", "protocol-11-reject-unknown-foo", FromHex("83 a1 76 01 a2 69 64 a2 74 35 a3 66 6f 6f c3"));
  Write("result_event", "protocol-11-started",
        FromHex("85 a1 76 01 a4 74 79 70 65 a7 73 74 61 72 74 65 64 a3 73 65 71 00 a6 77"
                "6f 72 6b 65 72 a1 77 a7 61 74 74 65 6d 70 74 01"));
}

void Jobs() {
  JobSpec argv;
  argv.id = "build-42";
  argv.argv = {"/usr/bin/env", "-i", "sh", "-c", "echo $X"};
  argv.env = {{"X", "1"}, {"LANG", "C.UTF-8"}};
  argv.cwd = "/work/src";
  argv.stdin_data = "line 1\nline 2\n";
  argv.timeout_ms = 5000;
  argv.max_output_bytes = 4096;
  argv.retries = 2;
  argv.memory_bytes = 64ull << 20;
  argv.pids = 32;
  argv.cpu_time_ms = 2000;
  Write("job", "encoded-argv-all-fields", EncodeJob(argv));

  JobSpec shell;
  shell.id = "agent:step.7";
  shell.shell = "ls /opt | wc -l";
  shell.template_name = "tools";
  Write("job", "encoded-shell-template", EncodeJobRequest(shell, false));

  JobSpec python;
  python.id = "py-1";
  python.code = "import sys\nprint(sum(range(10)), file=sys.stderr)\n";
  python.runtime = "python";
  python.timeout_ms = 1000;
  Write("job", "encoded-code-python", EncodeJob(python));

  JobSpec node;
  node.id = "js-1";
  node.code = "console.log('h\u00e9llo')";
  node.runtime = "node";
  node.template_name = "node";
  Write("job", "encoded-code-node-utf8", EncodeJobRequest(node, false));
}

void ResultsAndEvents() {
  JobResult ok;
  ok.id = "build-42";
  ok.outcome = Outcome::kExit;
  ok.exit_code = 0;
  ok.stdout_data = "hello\n";
  ok.exec_time_us = 1834;
  ok.cpu_time_us = 1200;
  ok.peak_memory_bytes = 3ull << 20;
  ok.queue_wait_us = 90;
  ok.worker = "host-a/3";
  ok.attempt = 1;
  Write("result_event", "result-exit-0", EncodeResult(ok));

  JobResult killed;
  killed.id = "t9";
  killed.outcome = Outcome::kTimeout;
  killed.signal = 9;
  killed.timed_out = true;
  killed.killed = true;
  killed.stdout_data = std::string(64, 'x');
  killed.stdout_truncated = true;
  killed.stdout_dropped_bytes = 1u << 20;
  killed.stderr_data = std::string("\x00\xff binary", 9);
  killed.worker = "host-b/0";
  killed.attempt = 2;
  Write("result_event", "result-timeout-truncated", EncodeResult(killed));

  JobResult failed;
  failed.id = "t10";
  failed.outcome = Outcome::kError;
  failed.exit_code = 127;
  failed.error = JobError{ErrorCode::kExecFailed, "exec: No such file or directory"};
  failed.attempt = 1;
  Write("result_event", "result-exec-failed", EncodeResult(failed));

  JobResult lost;
  lost.id = "t11";
  lost.outcome = Outcome::kWorkerLost;
  lost.exit_code = -1;
  lost.error = JobError{ErrorCode::kWorkerLost, "the daemon running it went away"};
  Write("result_event", "result-worker-lost", EncodeResult(lost));

  Write("result_event", "event-started", EncodeStartedEvent(0, "host-a/3", 1));
  Write("result_event", "event-stdout", EncodeOutputEvent(1, "stdout", "hello\n"));
  Write("result_event", "event-stderr", EncodeOutputEvent(2, "stderr", "warning: x\n"));
  Write("result_event", "event-exited", EncodeExitedEvent(3, ok));
  Write("result_event", "event-exited-error", EncodeExitedEvent(7, failed));
}

void Messages() {
  Write("messages", "ready", Encode(ReadyMsg{3, 4210}));
  RunMsg run;
  run.generation = 3;
  run.kind = "shell";
  run.code = "echo hi";
  run.argv = {"/bin/sh", "-c", "echo hi"};
  run.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/work", "LANG=C.UTF-8"};
  run.cwd = "/work";
  run.cpu_time_ms = 1000;
  run.memory_bytes = 64ull << 20;
  run.pids = 32;
  run.file_size_bytes = 256ull << 20;
  run.open_files = 1024;
  Write("messages", "run-shell", Encode(run));
  RunMsg code;
  code.generation = 9;
  code.kind = "code";
  code.code = "print(1)";
  code.cwd = "/work";
  Write("messages", "run-code", Encode(code));
  ExitedMsg exited;
  exited.generation = 3;
  exited.have_status = true;
  exited.wait_status = 9;  // killed by SIGKILL
  exited.started = true;
  exited.killed = true;
  exited.cpu_limit = true;
  exited.cpu_time_us = 1000512;
  exited.peak_memory_bytes = 12ull << 20;
  exited.oom_kills = 1;
  exited.pids_max_hits = 2;
  exited.disk_full = true;
  exited.exec_time_us = 1200000;
  Write("messages", "exited-killed", Encode(exited));
  ExitedMsg exec_failed;
  exec_failed.generation = 4;
  exec_failed.exec_errno = 2;
  exec_failed.exec_stage = "exec";
  exec_failed.wait_status = -1;
  Write("messages", "exited-exec-failed", Encode(exec_failed));
  Write("messages", "generation", Encode(GenerationMsg{3}));
  Write("messages", "failed", Encode(FailedMsg{"clone3: Operation not permitted"}));
  Write("messages", "spawn-keeper", Encode(SpawnKeeperMsg{5, 1}));
  Write("messages", "keeper", Encode(KeeperMsg{5, 31337}));
}

// Channel scripts (see channel_fuzz.cc for the operations).
std::string FrameOp(MsgType type, std::string_view payload, int fds, int cut) {
  auto t = static_cast<uint16_t>(type);
  std::string op = {'\x01', static_cast<char>(t & 0xff), static_cast<char>(t >> 8),
                    static_cast<char>(fds), static_cast<char>(payload.size()), static_cast<char>(cut)};
  return op + std::string(payload);
}
std::string RawOp(std::string_view bytes, int fds) {
  return std::string{'\x00', static_cast<char>(bytes.size()), static_cast<char>(fds)} + std::string(bytes);
}
const std::string kReadOp = "\x02";

void ChannelScripts() {
  std::string ready = Encode(ReadyMsg{1, 900});
  ExitedMsg ex;
  ex.generation = 1;
  ex.have_status = true;
  ex.started = true;
  ex.cpu_time_us = 10;
  ex.peak_memory_bytes = 20;
  ex.exec_time_us = 30;
  std::string exited = Encode(ex);
  // What a keeper sends in one job's life: Ready with the sandbox's three pipe ends, Started,
  // Exited; the scheduler reading as each arrives.
  Write("channel", "keeper-job",
        FrameOp(MsgType::kReady, ready, 3, 0) + kReadOp +
            FrameOp(MsgType::kStarted, Encode(GenerationMsg{1}), 0, 0) +
            FrameOp(MsgType::kExited, exited, 0, 3) + kReadOp);
  // The spawner's answer: the keeper's channel end and its pidfd.
  Write("channel", "spawner-keeper", FrameOp(MsgType::kKeeper, Encode(KeeperMsg{2, 4242}), 2, 0));
  // Frames back to back before one read; one cut inside its header.
  Write("channel", "burst",
        FrameOp(MsgType::kFailed, Encode(FailedMsg{"no"}), 0, 5) + FrameOp(MsgType::kReady, ready, 3, 1) +
            FrameOp(MsgType::kStarted, Encode(GenerationMsg{2}), 0, 0) + FrameOp(MsgType::kKill, "", 0, 0));
  // Malformed: a 4 GiB length; 9 fds declared; fds declared but none sent; 20 fds in one
  // sendmsg (more than the reader's control buffer holds).
  Write("channel", "bad-length", RawOp(std::string("\xff\xff\xff\xff\x01\x00\x00\x00", 8), 0));
  Write("channel", "bad-fd-count", RawOp(std::string("\x00\x00\x00\x00\x01\x00\x09\x00", 8), 9));
  Write("channel", "fds-missing", RawOp(std::string("\x01\x00\x00\x00\x03\x00\x02\x00z", 9), 0));
  Write("channel", "too-many-fds", RawOp(std::string("\x00\x00\x00\x00\x03\x00\x08\x00", 8), 20));
  // A partial frame at EOF, and the peer closing mid-script.
  Write("channel", "partial-at-eof", FrameOp(MsgType::kRun, "", 0, 0) + RawOp(std::string("\x05\x00\x00\x00\x0a\x00", 6), 0));
  Write("channel", "close-early", FrameOp(MsgType::kStarted, Encode(GenerationMsg{1}), 1, 2) + "\x03" +
                                     FrameOp(MsgType::kStarted, "", 0, 0));
}

}  // namespace
}  // namespace sandpool

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_ROOT (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  sandpool::g_root = argv[1];
  sandpool::ProtocolVectors();
  sandpool::Jobs();
  sandpool::ResultsAndEvents();
  sandpool::Messages();
  sandpool::ChannelScripts();
  return 0;
}
