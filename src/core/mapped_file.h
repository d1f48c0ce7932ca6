#pragma once
// A read-only memory map of a whole file. Moving transfers ownership.
#include <cstddef>
#include <cstdint>
#include <string>

namespace strata {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // madvise() on [offset, offset + len) rounded out to pages (best effort; returns false on error).
  bool advise(uint64_t offset, uint64_t len, int advice) const;
  // Replaces [offset, offset + len), rounded out to pages, with anonymous memory holding the same
  // bytes (read with O_DIRECT where the file system allows), at the same addresses: pointers
  // stay valid, and the pages are process memory the kernel cannot drop and fault back in 4 KiB
  // at a time under memory pressure, as it does with a file mapping. Returns the bytes copied.
  uint64_t make_anonymous(uint64_t offset, uint64_t len);

 private:
  void reset();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace strata
