// The stdio of one process the daemon follows (a job's main process, or a session's command):
// its stdin written from a buffer without blocking, its stdout and stderr read as they come, the
// bytes kept up to a cap per stream (past it: the rest is counted as dropped and on_cap runs
// once, so the owner can kill the process), and each kept chunk handed to on_output. Driven by
// the libevent loop; bounded work per callback, so a flooding process cannot starve the loop.
//
// Ownership: owns the three fds and its events. Callbacks run on the loop thread and must not
// destroy the ProcessIo.
#pragma once

#include <event2/event.h>

#include <functional>
#include <string>
#include <string_view>

#include "common/fd.h"
#include "queue/protocol.h"

namespace sandpool {

class ProcessIo {
 public:
  struct Hooks {
    std::function<void(std::string_view stream, std::string_view data)> on_output;  // "stdout"/"stderr"
    std::function<void()> on_cap;   // a stream passed its cap (runs once)
    std::function<void()> on_eof;   // both streams reached EOF (or were given up on)
  };
  // What was read.
  struct Output {
    std::string data[2];  // stdout, stderr: the first `cap` bytes
    bool truncated[2] = {false, false};
    uint64_t dropped[2] = {0, 0};
    // Keep only the newest `cap` bytes instead of the first (background processes); with a cap
    // of 0, keep nothing (everything is passed on live and counted as dropped).
    bool keep_newest = false;
  };

  ProcessIo() = default;
  ~ProcessIo();
  ProcessIo(const ProcessIo&) = delete;
  ProcessIo& operator=(const ProcessIo&) = delete;

  // Starts following. `stdin_data` is written then stdin closed, unless `keep_stdin` (then the
  // caller writes more with WriteStdin and closes it with CloseStdin).
  void Start(struct event_base* base, UniqueFd stdin_w, UniqueFd stdout_r, UniqueFd stderr_r, std::string stdin_data,
             uint64_t cap, bool keep_newest, bool keep_stdin, Hooks hooks);
  // Queues more stdin (background processes); false if stdin is closed.
  bool WriteStdin(std::string_view data);
  void CloseStdin();
  bool stdin_open() const { return stdin_.valid(); }
  // Stdin bytes queued and not yet taken by the process.
  size_t stdin_buffered() const { return stdin_buf_.size() - stdin_off_; }
  // Stops waiting for EOF: closes what is still open (a writer we do not control kept a pipe).
  void GiveUp();
  bool eof() const { return eof_[0] && eof_[1]; }
  Output& output() { return out_; }
  // Frees the events and fds.
  void Stop();

 private:
  static void OnPipe(evutil_socket_t fd, short, void* arg);
  static void OnStdin(evutil_socket_t, short, void* arg);
  void Read(int which);
  void Flush();
  void CloseStream(int which);

  struct event_base* base_ = nullptr;
  UniqueFd stdin_, pipes_[2];
  struct event* pipe_ev_[2] = {nullptr, nullptr};
  struct event* stdin_ev_ = nullptr;
  std::string stdin_buf_;
  size_t stdin_off_ = 0;
  bool close_stdin_when_flushed_ = true;
  bool eof_[2] = {false, false};
  bool capped_ = false;
  uint64_t cap_ = 0;
  Output out_;
  Hooks hooks_;
};

// Moves what was read into a result (stdout/stderr data, truncated flags, dropped counts): the
// one place a process's output becomes a job's, a session command's or a code call's result.
void FoldOutput(ProcessIo::Output&& out, JobResult* r);

}  // namespace sandpool
