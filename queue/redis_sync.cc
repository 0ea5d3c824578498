#include "queue/redis_sync.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/clock.h"

namespace sandpool {
namespace {

struct timeval MsToTimeval(int ms) {
  struct timeval tv;
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

// Waits until `fd` is ready for `events` or `deadline_us` (monotonic; < 0: none) passes.
// Returns OK when ready, ETIMEDOUT on the deadline.
Status PollUntil(int fd, short events, int64_t deadline_us) {
  for (;;) {
    int wait_ms = -1;
    if (deadline_us >= 0) {
      int64_t left = deadline_us - MonotonicUs();
      if (left < 0) left = 0;
      wait_ms = static_cast<int>((left + 999) / 1000);
    }
    struct pollfd p = {fd, events, 0};
    int n = poll(&p, 1, wait_ms);
    if (n > 0) return Status::Ok();  // POLLERR / POLLHUP too: the read or write will report it
    if (n == 0) {
      if (deadline_us >= 0 && MonotonicUs() >= deadline_us) {
        return Status::Error("redis: timed out", ETIMEDOUT);
      }
      continue;
    }
    if (errno != EINTR) return ErrnoStatus("redis: poll");
  }
}

int64_t DeadlineFor(int timeout_ms) {
  return timeout_ms < 0 ? -1 : MonotonicUs() + int64_t{timeout_ms} * 1000;
}

}  // namespace

Status SyncRedis::ContextError(std::string_view what) const {
  std::string msg = "redis: " + std::string(what) + ": " + ctx_->errstr;
  // hiredis reports a socket timeout as an I/O error with EAGAIN in errstr; callers want one
  // errno to test, so both spellings map to ETIMEDOUT.
  int err = 0;
  if (ctx_->err == REDIS_ERR_IO) {
    if (std::strstr(ctx_->errstr, "temporarily unavailable") ||
        std::strstr(ctx_->errstr, "timed out")) {
      err = ETIMEDOUT;
    } else {
      err = EIO;
    }
  } else if (ctx_->err == REDIS_ERR_EOF) {
    err = ECONNRESET;
  }
  return Status::Error(std::move(msg), err);
}

Result<std::unique_ptr<SyncRedis>> SyncRedis::Connect(const RedisUrl& url, int timeout_ms) {
  redisContext* c = nullptr;
  struct timeval tv = MsToTimeval(timeout_ms);
  if (!url.unix_path.empty()) {
    c = timeout_ms > 0 ? redisConnectUnixWithTimeout(url.unix_path.c_str(), tv)
                       : redisConnectUnix(url.unix_path.c_str());
  } else {
    c = timeout_ms > 0 ? redisConnectWithTimeout(url.host.c_str(), url.port, tv)
                       : redisConnect(url.host.c_str(), url.port);
  }
  if (c == nullptr) return Status::Error("redis: cannot allocate a context", ENOMEM);
  // Own the context from here on, so that every error path frees it.
  std::unique_ptr<SyncRedis> conn(new SyncRedis(c));
  conn->io_timeout_ms_ = timeout_ms > 0 ? timeout_ms : 0;
  if (c->err) return conn->ContextError("connect to " + url.Redacted());

  // hiredis 0.14 opens its socket without SOCK_CLOEXEC; mark it before anything can exec.
  if (fcntl(c->fd, F_SETFD, FD_CLOEXEC) != 0) return ErrnoStatus("redis: fcntl(FD_CLOEXEC)");
  // redisConnectWithTimeout also sets SO_RCVTIMEO/SO_SNDTIMEO. A read that hits SO_RCVTIMEO
  // leaves the context in an error state for good, so reads have no socket timeout: every read
  // is preceded by poll() with our own deadline. Writes keep SO_SNDTIMEO, which bounds a
  // stalled server; a write timeout does end the connection, as it should.
  struct timeval none = {0, 0};
  if (setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none)) != 0) {
    return ErrnoStatus("redis: setsockopt(SO_RCVTIMEO)");
  }

  if (!url.password.empty()) {
    std::vector<std::string> auth = {"AUTH"};
    if (!url.user.empty()) auth.push_back(url.user);
    auth.push_back(url.password);
    auto r = conn->Command(auth);
    if (!r.ok()) return r.status().Prefixed("AUTH");
  }
  if (url.db != 0) {
    auto r = conn->Command({"SELECT", std::to_string(url.db)});
    if (!r.ok()) return r.status().Prefixed("SELECT " + std::to_string(url.db));
  }
  return conn;
}

SyncRedis::~SyncRedis() { redisFree(ctx_); }

Status SyncRedis::Append(const std::vector<std::string>& args) {
  if (args.empty()) return Status::Error("redis: empty command");
  if (ctx_->err) return ContextError("connection unusable");
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  argv.reserve(args.size());
  lens.reserve(args.size());
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  if (redisAppendCommandArgv(ctx_, static_cast<int>(args.size()), argv.data(), lens.data()) !=
      REDIS_OK) {
    return ContextError("append");
  }
  return Status::Ok();
}

Status SyncRedis::Flush() {
  int64_t deadline = io_timeout_ms_ > 0 ? DeadlineFor(io_timeout_ms_) : -1;
  int done = 0;
  while (!done) {
    SP_RETURN_IF_ERROR(PollUntil(ctx_->fd, POLLOUT, deadline));
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) return ContextError("write");
  }
  return Status::Ok();
}

Result<ReplyPtr> SyncRedis::ReadReply(int timeout_ms) {
  if (ctx_->err) return ContextError("connection unusable");
  // Anything appended but not yet sent must go out first, or we would wait for a reply to a
  // command the server never saw.
  SP_RETURN_IF_ERROR(Flush());
  int64_t deadline = DeadlineFor(timeout_ms);
  for (;;) {
    void* raw = nullptr;
    // A previous read may have brought in several replies: hand those out before touching the
    // socket.
    if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK) return ContextError("protocol");
    if (raw != nullptr) {
      ReplyPtr reply(static_cast<redisReply*>(raw));
      return reply;
    }
    SP_RETURN_IF_ERROR(PollUntil(ctx_->fd, POLLIN, deadline));
    // poll() said readable, so this single read() returns at once (data, EOF or error); hiredis
    // never waits on the socket itself.
    if (redisBufferRead(ctx_) != REDIS_OK) return ContextError("read");
  }
}

Result<ReplyPtr> SyncRedis::Command(const std::vector<std::string>& args) {
  SP_RETURN_IF_ERROR(Append(args));
  auto r = ReadReply(io_timeout_ms_ > 0 ? io_timeout_ms_ : -1);
  if (!r.ok()) {
    if (r.status().sys_errno() == ETIMEDOUT && ctx_->err == 0) {
      // The reply may still arrive and would then be taken as the answer to the next command:
      // retire the connection instead.
      ctx_->err = REDIS_ERR_IO;
      std::snprintf(ctx_->errstr, sizeof(ctx_->errstr), "%s", "command timed out");
    }
    return r.status();
  }
  if (r.value()->type == REDIS_REPLY_ERROR) {
    return Status::Error(std::string(r.value()->str, r.value()->len));
  }
  return r;
}

}  // namespace sandpool
