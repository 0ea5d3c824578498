#include "scheduler/jobs/process_io.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace sandpool {
namespace {

constexpr size_t kChunk = 65536;
const char* const kStreamName[2] = {"stdout", "stderr"};

}  // namespace

ProcessIo::~ProcessIo() { Stop(); }

void ProcessIo::Start(struct event_base* base, UniqueFd stdin_w, UniqueFd stdout_r, UniqueFd stderr_r,
                      std::string stdin_data, uint64_t cap, bool keep_newest, bool keep_stdin, Hooks hooks) {
  Stop();
  base_ = base;
  stdin_ = std::move(stdin_w);
  pipes_[0] = std::move(stdout_r);
  pipes_[1] = std::move(stderr_r);
  cap_ = cap;
  out_ = Output();
  out_.keep_newest = keep_newest;
  hooks_ = std::move(hooks);
  capped_ = false;
  eof_[0] = eof_[1] = false;
  for (int i = 0; i < 2; ++i) {
    (void)SetNonBlocking(pipes_[i].get());
    pipe_ev_[i] = event_new(base_, pipes_[i].get(), EV_READ | EV_PERSIST, &ProcessIo::OnPipe, this);
    event_add(pipe_ev_[i], nullptr);
  }
  close_stdin_when_flushed_ = !keep_stdin;
  stdin_buf_ = std::move(stdin_data);
  stdin_off_ = 0;
  if (stdin_) {
    (void)SetNonBlocking(stdin_.get());
    stdin_ev_ = event_new(base_, stdin_.get(), EV_WRITE | EV_PERSIST, &ProcessIo::OnStdin, this);
    Flush();
  }
}

bool ProcessIo::WriteStdin(std::string_view data) {
  if (!stdin_) return false;
  stdin_buf_.append(data);
  Flush();
  return true;
}

void ProcessIo::CloseStdin() {
  close_stdin_when_flushed_ = true;
  Flush();
}

void ProcessIo::OnStdin(evutil_socket_t, short, void* arg) { static_cast<ProcessIo*>(arg)->Flush(); }

void ProcessIo::Flush() {
  if (!stdin_) return;
  while (stdin_off_ < stdin_buf_.size()) {
    ssize_t n = ::write(stdin_.get(), stdin_buf_.data() + stdin_off_, stdin_buf_.size() - stdin_off_);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        event_add(stdin_ev_, nullptr);
        return;
      }
      // EPIPE: the process closed its stdin; the rest is dropped.
      stdin_buf_.clear();
      stdin_off_ = 0;
      close_stdin_when_flushed_ = true;
      break;
    }
    stdin_off_ += static_cast<size_t>(n);
  }
  stdin_buf_.clear();
  stdin_off_ = 0;
  event_del(stdin_ev_);
  if (close_stdin_when_flushed_) {
    event_free(stdin_ev_);
    stdin_ev_ = nullptr;
    stdin_.reset();
  }
}

void ProcessIo::OnPipe(evutil_socket_t fd, short, void* arg) {
  auto* self = static_cast<ProcessIo*>(arg);
  self->Read(fd == self->pipes_[0].get() ? 0 : 1);
}

void ProcessIo::Read(int which) {
  std::string& kept = out_.data[which];
  char buf[kChunk];
  // Bounded work per callback, so one flooding process cannot starve the loop.
  for (int round = 0; round < 4; ++round) {
    ssize_t n = ::read(pipes_[which].get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      CloseStream(which);
      if (eof() && hooks_.on_eof) hooks_.on_eof();
      return;
    }
    size_t len = static_cast<size_t>(n);
    std::string_view chunk(buf, len);
    if (out_.keep_newest) {
      // A ring of the newest `cap` bytes: everything is passed on live.
      kept.append(chunk);
      if (kept.size() > cap_) {
        size_t cut = kept.size() - static_cast<size_t>(cap_);
        out_.dropped[which] += cut;
        out_.truncated[which] = true;
        kept.erase(0, cut);
      }
      if (hooks_.on_output) hooks_.on_output(kStreamName[which], chunk);
      continue;
    }
    size_t room = kept.size() < cap_ ? static_cast<size_t>(cap_ - kept.size()) : 0;
    size_t keep = std::min(len, room);
    if (keep > 0) {
      kept.append(buf, keep);
      if (hooks_.on_output) hooks_.on_output(kStreamName[which], std::string_view(buf, keep));
    }
    if (keep < len) {
      out_.dropped[which] += len - keep;
      out_.truncated[which] = true;
      if (!capped_) {
        capped_ = true;
        if (hooks_.on_cap) hooks_.on_cap();
      }
    }
  }
}

void ProcessIo::CloseStream(int which) {
  eof_[which] = true;
  if (pipe_ev_[which] != nullptr) event_free(pipe_ev_[which]);
  pipe_ev_[which] = nullptr;
  pipes_[which].reset();
}

void ProcessIo::GiveUp() {
  bool was = eof();
  for (int i = 0; i < 2; ++i) {
    if (!eof_[i]) CloseStream(i);
  }
  if (!was && hooks_.on_eof) hooks_.on_eof();
}

void ProcessIo::Stop() {
  for (int i = 0; i < 2; ++i) {
    if (pipe_ev_[i] != nullptr) event_free(pipe_ev_[i]);
    pipe_ev_[i] = nullptr;
    pipes_[i].reset();
  }
  if (stdin_ev_ != nullptr) event_free(stdin_ev_);
  stdin_ev_ = nullptr;
  stdin_.reset();
}

void FoldOutput(ProcessIo::Output&& out, JobResult* r) {
  r->stdout_data = std::move(out.data[0]);
  r->stderr_data = std::move(out.data[1]);
  r->stdout_truncated = out.truncated[0];
  r->stderr_truncated = out.truncated[1];
  r->stdout_dropped_bytes = out.dropped[0];
  r->stderr_dropped_bytes = out.dropped[1];
}

}  // namespace sandpool
