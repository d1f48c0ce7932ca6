#pragma once
// The memory page size of this machine (4 KiB on x86-64; 4, 16 or 64 KiB on ARM64 kernels),
// and the alignment of O_DIRECT reads: never below 4096 (4K-sector disks), never below a page
// (buffers and mmap offsets must be page-aligned). Both read once from sysconf.
#include <cstdint>

namespace strata {

uint64_t page_size();
// O_DIRECT offset, length and buffer alignment: max(4096, page_size()).
uint64_t io_align();

}  // namespace strata
