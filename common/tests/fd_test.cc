#include "common/fd.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace sandpool {
namespace {

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

TEST(UniqueFd, ClosesOnDestruction) {
  int raw;
  {
    auto p = MakePipe();
    ASSERT_TRUE(p.ok());
    raw = p->read.get();
    EXPECT_TRUE(IsOpen(raw));
  }
  EXPECT_FALSE(IsOpen(raw));
}

TEST(UniqueFd, MoveTransfersOwnership) {
  auto p = MakePipe();
  ASSERT_TRUE(p.ok());
  int raw = p->read.get();
  UniqueFd moved = std::move(p->read);
  EXPECT_FALSE(p->read.valid());
  EXPECT_EQ(moved.get(), raw);
  int released = moved.release();
  EXPECT_FALSE(moved.valid());
  EXPECT_TRUE(IsOpen(released));
  UniqueFd again(released);
}

TEST(UniqueFd, EverythingIsCloexec) {
  auto p = MakePipe();
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(::fcntl(p->read.get(), F_GETFD) & FD_CLOEXEC);
  EXPECT_TRUE(::fcntl(p->write.get(), F_GETFD) & FD_CLOEXEC);
  auto s = MakeSocketPair(SOCK_STREAM);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(::fcntl(s->a.get(), F_GETFD) & FD_CLOEXEC);
}

TEST(FdIo, ReadExactReportsEarlyEof) {
  auto p = MakePipe();
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(WriteAll(p->write.get(), "abc", 3).ok());
  p->write.reset();
  char buf[4];
  Status s = ReadExact(p->read.get(), buf, 4);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.sys_errno(), 0);
}

}  // namespace
}  // namespace sandpool
