#include "core/zero_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace strata {

ZeroBuffer::ZeroBuffer(size_t bytes) {
  if (bytes == 0) return;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  STRATA_CHECK(p != MAP_FAILED, "cannot map {} bytes of zeroed memory: {}", bytes, std::strerror(errno));
  data_ = static_cast<uint8_t*>(p);
  size_ = bytes;
  ::madvise(data_, size_, MADV_HUGEPAGE);  // fewer first-write faults, where the kernel offers them
}

ZeroBuffer::~ZeroBuffer() { reset(); }

ZeroBuffer::ZeroBuffer(ZeroBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

ZeroBuffer& ZeroBuffer::operator=(ZeroBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void ZeroBuffer::reset() {
  if (data_) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace strata
