#include "common/syscalls.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "common/fd.h"

namespace sandpool {
namespace {

// What /proc/self/fdinfo says for a pidfd (the way before PIDFD_GET_INFO, and its fallback).
pid_t FdinfoPid(int pidfd) {
  std::ifstream in("/proc/self/fdinfo/" + std::to_string(pidfd));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Pid:", 0) == 0) return static_cast<pid_t>(std::stol(line.substr(4)));
  }
  return 0;
}

// PidfdPid's layout of struct pidfd_info and its ioctl number are spelled out by hand: on a
// kernel that has the ioctl it must agree with fdinfo, and on one that has not it must say so
// with the errno the caller falls back on.
TEST(Syscalls, PidfdPidAgreesWithFdinfoOrSaysItCannot) {
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  UniqueFd pidfd(sys::PidfdOpen(child));
  ASSERT_TRUE(pidfd) << "pidfd_open: " << errno;
  errno = 0;
  pid_t pid = sys::PidfdPid(pidfd.get());
  bool supported = pid != -1;
  if (supported) {
    EXPECT_EQ(pid, child);
  } else {
    EXPECT_TRUE(errno == ENOTTY || errno == EINVAL) << "errno " << errno;
  }
  EXPECT_EQ(FdinfoPid(pidfd.get()), child);

  ASSERT_EQ(::kill(child, SIGKILL), 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  EXPECT_EQ(FdinfoPid(pidfd.get()), -1);
  if (supported) {
    errno = 0;
    EXPECT_EQ(sys::PidfdPid(pidfd.get()), -1);
    EXPECT_EQ(errno, ESRCH);
  }
}

}  // namespace
}  // namespace sandpool
