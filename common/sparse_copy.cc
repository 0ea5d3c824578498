#include "common/sparse_copy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace sandpool {
namespace {

// The next extent of data at or after `from`: [start, end), or start == size at the end.
Status NextExtent(int fd, off_t from, off_t size, off_t* start, off_t* end) {
  off_t s = ::lseek(fd, from, SEEK_DATA);
  if (s < 0) {
    if (errno == ENXIO) {  // no data after `from`
      *start = *end = size;
      return Status::Ok();
    }
    return ErrnoStatus("SEEK_DATA");
  }
  off_t e = ::lseek(fd, s, SEEK_HOLE);
  if (e < 0) return ErrnoStatus("SEEK_HOLE");
  *start = s;
  *end = e;
  return Status::Ok();
}

}  // namespace

Result<uint64_t> CopySparse(int src, int dst) {
  struct stat st;
  if (::fstat(src, &st) != 0) return ErrnoStatus("fstat");
  if (::ftruncate(dst, 0) != 0 || ::ftruncate(dst, st.st_size) != 0) return ErrnoStatus("ftruncate");
  uint64_t copied = 0;
  off_t pos = 0;
  while (pos < st.st_size) {
    off_t start = 0, end = 0;
    SP_RETURN_IF_ERROR(NextExtent(src, pos, st.st_size, &start, &end));
    if (start >= st.st_size) break;
    loff_t in = start, out = start;
    while (in < end) {
      ssize_t n = ::copy_file_range(src, &in, dst, &out, static_cast<size_t>(end - in), 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("copy_file_range");
      }
      if (n == 0) break;  // src shrank under us
      copied += static_cast<uint64_t>(n);
    }
    pos = end;
  }
  if (::fsync(dst) != 0) return ErrnoStatus("fsync");
  return copied;
}

Status ForEachExtent(int src, uint64_t piece, const std::function<Status(uint64_t, std::string_view)>& extent) {
  struct stat st;
  if (::fstat(src, &st) != 0) return ErrnoStatus("fstat");
  std::string buf;
  off_t pos = 0;
  while (pos < st.st_size) {
    off_t start = 0, end = 0;
    SP_RETURN_IF_ERROR(NextExtent(src, pos, st.st_size, &start, &end));
    if (start >= st.st_size) break;
    for (off_t at = start; at < end;) {
      size_t want = static_cast<size_t>(std::min<uint64_t>(piece, static_cast<uint64_t>(end - at)));
      buf.resize(want);
      ssize_t n = ::pread(src, buf.data(), want, at);
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("pread");
      }
      if (n == 0) return Status::Ok();
      SP_RETURN_IF_ERROR(extent(static_cast<uint64_t>(at), std::string_view(buf.data(), static_cast<size_t>(n))));
      at += n;
    }
    pos = end;
  }
  return Status::Ok();
}

}  // namespace sandpool
