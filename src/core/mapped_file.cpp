#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/page_size.h"

namespace strata {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail("{}: cannot stat: {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", path);
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail("{}: cannot mmap {} bytes: {}", path, size_, std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() { reset(); }

bool MappedFile::advise(uint64_t offset, uint64_t len, int advice) const {
  if (!data_ || offset >= size_) return false;
  const uint64_t page = page_size();
  const uint64_t a = offset / page * page;
  const uint64_t e = std::min<uint64_t>(size_, offset + len);
  return ::madvise(const_cast<uint8_t*>(data_) + a, e - a, advice) == 0;
}

uint64_t MappedFile::make_anonymous(uint64_t offset, uint64_t len) {
  const uint64_t page = page_size();
  if (!data_ || offset >= size_ || len == 0) return 0;
  const uint64_t a = offset / page * page;
  const uint64_t e = std::min<uint64_t>(size_, offset + len);
  const uint64_t span = (e - a + page - 1) / page * page;  // whole pages (the last may pass EOF)
  uint8_t* dst = const_cast<uint8_t*>(data_) + a;
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  const bool direct = fd >= 0;
  if (!direct) fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);  // e.g. tmpfs: no O_DIRECT
  if (fd < 0) fail("{}: cannot reopen to copy bytes {}..{} into memory: {}", path_, a, e, std::strerror(errno));
  // From here on the range is no longer file-backed: a failure below cannot fall back.
  void* p = ::mmap(dst, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    fail("{}: cannot map {} anonymous bytes for the copy at offset {}: {}", path_, span, a, std::strerror(err));
  }
  ::madvise(dst, span, MADV_HUGEPAGE);  // where the kernel offers them (only fully covered 2 MiB pages)
  for (uint64_t done = 0; done < e - a;) {
    const uint64_t want = std::min<uint64_t>(span - done, 8u << 20);
    ssize_t n = -1;
    for (int attempt = 0; attempt < 3 && n < 0; ++attempt) n = ::pread(fd, dst + done, want, static_cast<off_t>(a + done));
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      fail("{}: reading bytes at offset {} into memory failed: {}", path_, a + done, n < 0 ? std::strerror(err) : "unexpected end of file");
    }
    done += static_cast<uint64_t>(n);
  }
  if (!direct) ::posix_fadvise(fd, static_cast<off_t>(a), static_cast<off_t>(e - a), POSIX_FADV_DONTNEED);  // no second copy in the page cache
  ::close(fd);
  ::mprotect(dst, span, PROT_READ);
  return span;
}

MappedFile::MappedFile(MappedFile&& o) noexcept : path_(std::move(o.path_)), data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    reset();
    path_ = std::move(o.path_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

void MappedFile::reset() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace strata
