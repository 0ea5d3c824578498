#include "common/status.h"

#include <cstring>

namespace sandpool {

Status Status::Prefixed(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(std::move(m), errno_);
}

Status ErrnoStatus(std::string_view context, int err) {
  std::string m(context);
  m += ": ";
  m += std::strerror(err);
  return Status::Error(std::move(m), err);
}

}  // namespace sandpool
