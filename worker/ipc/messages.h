// Messages between the scheduler, the spawner and the keepers (frame types and payloads for
// worker/ipc/channel.h). Payloads are msgpack maps (worker/ipc/wire.h: each struct's members are its
// field list, the same style as session_messages.h); both ends are this binary, so there is no
// versioning beyond the frame type. Decoding never throws: a bad payload is an error Status.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "worker/ipc/wire.h"

namespace sandpool {

enum class MsgType : uint16_t {
  // keeper -> scheduler
  kReady = 1,    // a sandbox is prepared; fds: stdin write end, stdout read end, stderr read end
  kStarted = 2,  // the job's exec succeeded
  kExited = 3,   // the sandbox is gone; accounting attached
  kFailed = 4,   // preparing a sandbox failed (the keeper retries with backoff)
  // scheduler -> keeper
  kRun = 10,     // run this job in the prepared sandbox
  kKill = 11,    // kill the sandbox of this generation now
  // scheduler <-> spawner
  kSpawnKeeper = 20,  // scheduler -> spawner: start the keeper of a slot
  kKeeper = 21,       // spawner -> scheduler: a keeper started; fds: the scheduler's channel end,
                      // the keeper's pidfd
  kMakeDisk = 22,     // scheduler -> spawner: make a session's disk image, new or a copy (MakeDiskMsg)
  kDiskMade = 23,     // spawner -> scheduler: done, or why not (DiskMadeMsg)
};

struct ReadyMsg {
  uint64_t generation = 0;  // counts sandboxes of this slot; echoed in Run/Kill/Exited
  uint64_t prepare_us = 0;  // time to prepare this sandbox
  MSGPACK_DEFINE_MAP(generation, prepare_us)
};

// Everything the sandbox needs to start a job. The keeper applies the cgroup parts and passes
// the same bytes to the stub, which applies rlimits and execs.
struct RunMsg {
  uint64_t generation = 0;
  std::string kind = "argv";      // "argv", "shell" or "code" (code: for the slot's zygote)
  std::string code;               // the shell line or the source code
  std::vector<std::string> argv;  // argv[0] is searched in PATH when it contains no '/'; for
                                  // shell jobs also filled as /bin/sh -c <line>
  std::vector<std::string> env;   // "NAME=value"
  std::string cwd;
  uint64_t cpu_time_ms = 0;       // 0: no CPU-time limit
  uint64_t memory_bytes = 0;      // 0: keep the slot's default
  uint64_t pids = 0;              // 0: keep the slot's default
  uint64_t file_size_bytes = 0;   // RLIMIT_FSIZE; 0: keep the default
  uint64_t open_files = 0;        // RLIMIT_NOFILE; 0: keep the default
  MSGPACK_DEFINE_MAP(generation, kind, code, argv, env, cwd, cpu_time_ms, memory_bytes, pids, file_size_bytes,
                     open_files)
};

struct ExitedMsg {
  uint64_t generation = 0;
  bool have_status = false;  // init reported the main process's wait status
  int32_t wait_status = 0;   // as from waitpid()
  int32_t exec_errno = 0;    // non-zero: the stub could not exec (see exec_stage)
  std::string exec_stage;    // "cwd", "exec", "seccomp", ...
  bool started = false;      // the exec happened
  bool killed = false;       // the keeper killed the sandbox (scheduler asked, or a limit)
  bool cpu_limit = false;    // the keeper killed it for the CPU-time limit
  bool memory_limit = false;  // the keeper killed it for the memory limit (v1 socket buffers)
  uint64_t cpu_time_us = 0;
  uint64_t peak_memory_bytes = 0;
  uint64_t oom_kills = 0;    // OOM kills in the sandbox's cgroup during the job
  uint64_t pids_max_hits = 0;  // forks refused by the pids limit during the job
  bool disk_full = false;    // /work or /tmp had no space or inodes left when the job ended
  uint64_t exec_time_us = 0;  // from exec to the main process's end (keeper's clock)
  MSGPACK_DEFINE_MAP(generation, have_status, wait_status, exec_errno, exec_stage, started, killed,
                     cpu_limit, memory_limit, cpu_time_us, peak_memory_bytes, oom_kills, pids_max_hits,
                     disk_full, exec_time_us)
};

// Started (keeper -> scheduler) and Kill (scheduler -> keeper) carry only the generation.
struct GenerationMsg {
  uint64_t generation = 0;
  MSGPACK_DEFINE_MAP(generation)
};

struct FailedMsg {
  std::string message;
  MSGPACK_DEFINE_MAP(message)
};

struct SpawnKeeperMsg {
  uint32_t slot = 0;
  uint32_t template_index = 0;  // into the template list the spawner was started with
  bool session = false;         // a session keeper (session_keeper.h), not a job keeper
  MSGPACK_DEFINE_MAP(slot, template_index, session)
};

// A session disk at `path` (a new file; its directory is made): a new, empty one, an image file
// of `bytes` (sparse) holding an ext4 file system (mke2fs is a program to run, and only a process
// without threads may start one); or, when `from` is set, a sparse copy of the image at `from` (a
// snapshot's, or a session's for a snapshot). Both paths are the daemon's own, under its state
// directory; the spawner follows no link in either.
struct MakeDiskMsg {
  uint64_t request = 0;
  std::string path;
  uint64_t bytes = 0;
  std::string from;
  MSGPACK_DEFINE_MAP(request, path, bytes, from)
};
struct DiskMadeMsg {
  uint64_t request = 0;
  std::string error;  // empty: made
  uint64_t data_bytes = 0;  // a copy: the bytes of data copied
  MSGPACK_DEFINE_MAP(request, error, data_bytes)
};

struct KeeperMsg {
  uint32_t slot = 0;
  int32_t pid = 0;
  MSGPACK_DEFINE_MAP(slot, pid)
};

// What a nursery mother's children need to set themselves up (nursery.h): the inside-the-sandbox
// part of the template's SandboxConfig and the seccomp filter (its BPF instructions as bytes).
struct NurseryConfigMsg {
  std::string hostname;
  uint64_t work_bytes = 0, tmp_bytes = 0, shm_bytes = 0, inodes = 0, open_files = 0, file_size_bytes = 0,
           upper_bytes = 0;
  bool has_layer = false;
  std::string layer_mount;
  std::string bpf;
  std::string runtime;                // the template's: python, or sh/bash (a shell nursery)
  std::vector<std::string> base_env;  // the warm shell's environment (a shell nursery)
  MSGPACK_DEFINE_MAP(hostname, work_bytes, tmp_bytes, shm_bytes, inodes, open_files, file_size_bytes, upper_bytes,
                     has_layer, layer_mount, bpf, runtime, base_env)
};

std::string Encode(const ReadyMsg& m);
std::string Encode(const NurseryConfigMsg& m);
Status Decode(std::string_view in, NurseryConfigMsg* m);
std::string Encode(const RunMsg& m);
std::string Encode(const ExitedMsg& m);
std::string Encode(const GenerationMsg& m);
std::string Encode(const FailedMsg& m);
std::string Encode(const SpawnKeeperMsg& m);
std::string Encode(const KeeperMsg& m);
std::string Encode(const MakeDiskMsg& m);
std::string Encode(const DiskMadeMsg& m);
Status Decode(std::string_view in, ReadyMsg* m);
Status Decode(std::string_view in, RunMsg* m);
Status Decode(std::string_view in, ExitedMsg* m);
Status Decode(std::string_view in, GenerationMsg* m);
Status Decode(std::string_view in, FailedMsg* m);
Status Decode(std::string_view in, SpawnKeeperMsg* m);
Status Decode(std::string_view in, KeeperMsg* m);
Status Decode(std::string_view in, MakeDiskMsg* m);
Status Decode(std::string_view in, DiskMadeMsg* m);

}  // namespace sandpool
