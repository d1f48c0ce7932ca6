#include "core/page_size.h"

#include <unistd.h>

#include <algorithm>

namespace strata {

uint64_t page_size() {
  static const uint64_t p = [] {
    const long v = ::sysconf(_SC_PAGESIZE);
    return v > 0 ? static_cast<uint64_t>(v) : uint64_t{4096};
  }();
  return p;
}

uint64_t io_align() {
  static const uint64_t a = std::max<uint64_t>(4096, page_size());
  return a;
}

}  // namespace strata
