// Errors as values. A Status is either OK or an error with a message (and, when it came from a
// system call, the errno). Result<T> holds a T or an error Status. Neither throws; both are
// cheap to move. errno is turned into a Status once, at the system-call wrapper, with context
// (ErrnoStatus), so callers further up only add their own context.
#pragma once

#include <cerrno>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace sandpool {

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  static Status Ok() { return Status(); }
  static Status Error(std::string message, int sys_errno = 0) {
    return Status(std::move(message), sys_errno);
  }

  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }
  // The errno of the failing system call, or 0 when the error did not come from one.
  int sys_errno() const { return errno_; }

  // Returns a copy whose message is "<context>: <message>".
  Status Prefixed(std::string_view context) const;

 private:
  Status(std::string message, int sys_errno)
      : failed_(true), errno_(sys_errno), message_(std::move(message)) {}

  bool failed_ = false;
  int errno_ = 0;
  std::string message_;
};

// "<context>: <strerror(err)>" with err kept in sys_errno().
Status ErrnoStatus(std::string_view context, int err = errno);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status error) : v_(std::move(error)) {}  // NOLINT: must not be OK

  bool ok() const { return v_.index() == 0; }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<1>(v_);
  }

 private:
  std::variant<T, Status> v_;
};

// Returns early from a function returning Status (or Result) when `expr` failed.
#define SP_RETURN_IF_ERROR(expr)              \
  do {                                        \
    ::sandpool::Status sp_status_ = (expr);   \
    if (!sp_status_.ok()) return sp_status_;  \
  } while (0)

}  // namespace sandpool
