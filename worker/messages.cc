#include "worker/messages.h"

#include <msgpack.hpp>

namespace sandpool {
namespace {

// Field lists in one place per message; MSGPACK_DEFINE_MAP needs members, so mirror structs.
struct ReadyWire {
  uint64_t generation, prepare_us;
  MSGPACK_DEFINE_MAP(generation, prepare_us)
};
struct RunWire {
  uint64_t generation;
  std::string kind, code;
  std::vector<std::string> argv, env;
  std::string cwd;
  uint64_t cpu_time_ms, memory_bytes, pids, file_size_bytes, open_files;
  MSGPACK_DEFINE_MAP(generation, kind, code, argv, env, cwd, cpu_time_ms, memory_bytes, pids, file_size_bytes,
                     open_files)
};
struct ExitedWire {
  uint64_t generation;
  bool have_status;
  int32_t wait_status, exec_errno;
  std::string exec_stage;
  bool started, killed, cpu_limit, memory_limit;
  uint64_t cpu_time_us, peak_memory_bytes, oom_kills, pids_max_hits;
  bool disk_full;
  uint64_t exec_time_us;
  MSGPACK_DEFINE_MAP(generation, have_status, wait_status, exec_errno, exec_stage, started, killed,
                     cpu_limit, memory_limit, cpu_time_us, peak_memory_bytes, oom_kills, pids_max_hits,
                     disk_full, exec_time_us)
};
struct GenerationWire {
  uint64_t generation;
  MSGPACK_DEFINE_MAP(generation)
};
struct FailedWire {
  std::string message;
  MSGPACK_DEFINE_MAP(message)
};
struct SpawnKeeperWire {
  uint32_t slot, template_index;
  bool session;
  MSGPACK_DEFINE_MAP(slot, template_index, session)
};
struct MakeDiskWire {
  uint64_t request;
  std::string path;
  uint64_t bytes;
  std::string from;
  MSGPACK_DEFINE_MAP(request, path, bytes, from)
};
struct DiskMadeWire {
  uint64_t request;
  std::string error;
  uint64_t data_bytes;
  MSGPACK_DEFINE_MAP(request, error, data_bytes)
};
struct KeeperWire {
  uint32_t slot;
  int32_t pid;
  MSGPACK_DEFINE_MAP(slot, pid)
};

struct NurseryConfigWire {
  std::string hostname;
  uint64_t work_bytes, tmp_bytes, shm_bytes, inodes, open_files, file_size_bytes, upper_bytes;
  bool has_layer;
  std::string layer_mount;
  std::vector<char> bpf;
  MSGPACK_DEFINE_MAP(hostname, work_bytes, tmp_bytes, shm_bytes, inodes, open_files, file_size_bytes, upper_bytes,
                     has_layer, layer_mount, bpf)
};

template <typename W>
std::string Pack(const W& w) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, w);
  return std::string(buf.data(), buf.size());
}

// Bounds of a message between sandpool's own processes: a container header is believed only up
// to these (msgpack allocates what a header declares before reading any element, so a 5-byte
// payload could otherwise ask for 256 GiB). The largest real message is a job's Run: argv and
// env items within the protocol's limits, strings within a frame.
constexpr size_t kMaxItems = 1u << 17, kMaxMapPairs = 1u << 12, kMaxBytes = 64u << 20, kMaxDepth = 8;

template <typename W>
Status Unpack(std::string_view in, W* w) {
  try {
    msgpack::unpack_limit limit(kMaxItems, kMaxMapPairs, kMaxBytes, kMaxBytes, 0, kMaxDepth);
    size_t off = 0;
    msgpack::object_handle oh = msgpack::unpack(in.data(), in.size(), off, nullptr, nullptr, limit);
    oh.get().convert(*w);
  } catch (const std::exception& e) {
    return Status::Error(std::string("bad internal message: ") + e.what());
  }
  return Status::Ok();
}

}  // namespace

std::string Encode(const ReadyMsg& m) { return Pack(ReadyWire{m.generation, m.prepare_us}); }
Status Decode(std::string_view in, ReadyMsg* m) {
  ReadyWire w{};
  SP_RETURN_IF_ERROR(Unpack(in, &w));
  *m = {w.generation, w.prepare_us};
  return Status::Ok();
}

std::string Encode(const RunMsg& m) {
  return Pack(RunWire{m.generation, m.kind, m.code, m.argv, m.env, m.cwd, m.cpu_time_ms, m.memory_bytes, m.pids,
                      m.file_size_bytes, m.open_files});
}
Status Decode(std::string_view in, RunMsg* m) {
  RunWire w{};
  SP_RETURN_IF_ERROR(Unpack(in, &w));
  m->generation = w.generation;
  m->kind = std::move(w.kind);
  m->code = std::move(w.code);
  m->argv = std::move(w.argv);
  m->env = std::move(w.env);
  m->cwd = std::move(w.cwd);
  m->cpu_time_ms = w.cpu_time_ms;
  m->memory_bytes = w.memory_bytes;
  m->pids = w.pids;
  m->file_size_bytes = w.file_size_bytes;
  m->open_files = w.open_files;
  return Status::Ok();
}

std::string Encode(const ExitedMsg& m) {
  return Pack(ExitedWire{m.generation, m.have_status, m.wait_status, m.exec_errno, m.exec_stage,
                         m.started, m.killed, m.cpu_limit, m.memory_limit, m.cpu_time_us, m.peak_memory_bytes,
                         m.oom_kills, m.pids_max_hits, m.disk_full, m.exec_time_us});
}
Status Decode(std::string_view in, ExitedMsg* m) {
  ExitedWire w{};
  SP_RETURN_IF_ERROR(Unpack(in, &w));
  m->generation = w.generation;
  m->have_status = w.have_status;
  m->wait_status = w.wait_status;
  m->exec_errno = w.exec_errno;
  m->exec_stage = std::move(w.exec_stage);
  m->started = w.started;
  m->killed = w.killed;
  m->cpu_limit = w.cpu_limit;
  m->memory_limit = w.memory_limit;
  m->cpu_time_us = w.cpu_time_us;
  m->peak_memory_bytes = w.peak_memory_bytes;
  m->oom_kills = w.oom_kills;
  m->pids_max_hits = w.pids_max_hits;
  m->disk_full = w.disk_full;
  m->exec_time_us = w.exec_time_us;
  return Status::Ok();
}

std::string Encode(const GenerationMsg& m) { return Pack(GenerationWire{m.generation}); }
Status Decode(std::string_view in, GenerationMsg* m) {
  GenerationWire w{};
  SP_RETURN_IF_ERROR(Unpack(in, &w));
  m->generation = w.generation;
  return Status::Ok();
}

std::string Encode(const FailedMsg& m) { return Pack(FailedWire{m.message}); }
Status Decode(std::string_view in, FailedMsg* m) {
  FailedWire w{};
  SP_RETURN_IF_ERROR(Unpack(in, &w));
  m->message = std::move(w.message);
  return Status::Ok();
}

std::string Encode(const SpawnKeeperMsg& m) { return Pack(SpawnKeeperWire{m.slot, m.template_index, m.session}); }
Status Decode(std::string_view in, SpawnKeeperMsg* m) {
  SpawnKeeperWire w{};
  SP_RETURN_IF_ERROR(Unpack(in, &w));
  m->slot = w.slot;
  m->template_index = w.template_index;
  m->session = w.session;
  return Status::Ok();
}

std::string Encode(const KeeperMsg& m) { return Pack(KeeperWire{m.slot, m.pid}); }
Status Decode(std::string_view in, KeeperMsg* m) {
  KeeperWire w{};
  SP_RETURN_IF_ERROR(Unpack(in, &w));
  m->slot = w.slot;
  m->pid = w.pid;
  return Status::Ok();
}

std::string Encode(const NurseryConfigMsg& m) {
  return Pack(NurseryConfigWire{m.hostname, m.work_bytes, m.tmp_bytes, m.shm_bytes, m.inodes, m.open_files,
                                m.file_size_bytes, m.upper_bytes, m.has_layer, m.layer_mount,
                                std::vector<char>(m.bpf.begin(), m.bpf.end())});
}
Status Decode(std::string_view in, NurseryConfigMsg* m) {
  NurseryConfigWire w{};
  SP_RETURN_IF_ERROR(Unpack(in, &w));
  *m = {w.hostname, w.work_bytes, w.tmp_bytes, w.shm_bytes, w.inodes, w.open_files, w.file_size_bytes,
        w.upper_bytes, w.has_layer, w.layer_mount, std::string(w.bpf.begin(), w.bpf.end())};
  return Status::Ok();
}

std::string Encode(const MakeDiskMsg& m) { return Pack(MakeDiskWire{m.request, m.path, m.bytes, m.from}); }
Status Decode(std::string_view in, MakeDiskMsg* m) {
  MakeDiskWire w{};
  SP_RETURN_IF_ERROR(Unpack(in, &w));
  *m = {w.request, w.path, w.bytes, w.from};
  return Status::Ok();
}

std::string Encode(const DiskMadeMsg& m) { return Pack(DiskMadeWire{m.request, m.error, m.data_bytes}); }
Status Decode(std::string_view in, DiskMadeMsg* m) {
  DiskMadeWire w{};
  SP_RETURN_IF_ERROR(Unpack(in, &w));
  *m = {w.request, w.error, w.data_bytes};
  return Status::Ok();
}

}  // namespace sandpool
