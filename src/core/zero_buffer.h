#pragma once
// Zero-filled memory that costs nothing until it is written: an anonymous mapping, whose pages the
// kernel supplies (zeroed) on first write. A std::vector's zero fill writes every page at once,
// and on a virtual machine a first write to a page is expensive (the hypervisor backs it then):
// a KV cache sized for the whole context would pay that for every position before the first
// token. Moving transfers ownership.
#include <cstddef>
#include <cstdint>

namespace strata {

class ZeroBuffer {
 public:
  ZeroBuffer() = default;
  explicit ZeroBuffer(size_t bytes);  // throws strata::Error when the mapping fails
  ~ZeroBuffer();
  ZeroBuffer(ZeroBuffer&& o) noexcept;
  ZeroBuffer& operator=(ZeroBuffer&& o) noexcept;
  ZeroBuffer(const ZeroBuffer&) = delete;
  ZeroBuffer& operator=(const ZeroBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void reset();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace strata
