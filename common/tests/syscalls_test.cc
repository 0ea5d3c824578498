#include "common/syscalls.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include <gtest/gtest.h>

#include "common/fd.h"

namespace sandpool {
namespace {

// PidfdPid's layout of struct pidfd_info and its ioctl number are spelled out by hand: on a
// kernel that has the ioctl it must agree with fdinfo, and on one that has not it must say so
// with the errno PidOfPidfd falls back on. PidOfPidfd gives the pid either way, -1 once reaped.
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
  EXPECT_EQ(PidfdPidFromFdinfo(pidfd.get()), child);
  EXPECT_EQ(PidOfPidfd(pidfd.get()), child);

  ASSERT_EQ(::kill(child, SIGKILL), 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  EXPECT_EQ(PidfdPidFromFdinfo(pidfd.get()), -1);
  EXPECT_EQ(PidOfPidfd(pidfd.get()), -1);
  if (supported) {
    errno = 0;
    EXPECT_EQ(sys::PidfdPid(pidfd.get()), -1);
    EXPECT_EQ(errno, ESRCH);
  }
  // An fd that is no pidfd has no Pid: line.
  auto pipe = MakePipe();
  ASSERT_TRUE(pipe.ok());
  EXPECT_EQ(PidfdPidFromFdinfo(pipe->read.get()), 0);
}

}  // namespace
}  // namespace sandpool
