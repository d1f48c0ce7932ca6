#pragma once
// NEON kernels (ARM64), registered in table_neon.cpp. Every one gives the AVX2 table's bits.
#include <cstddef>
#include <cstdint>

namespace strata {
struct KernelTable;
}

namespace strata::neon {
// The integer-code dots, single- and multi-token (dot_neon.cpp, ARMv8-A baseline).
void fill_dots(KernelTable& t);
// Float dots and vector ops, activation quantizers (float_neon.cpp).
void fill_float(KernelTable& t);
}  // namespace strata::neon

namespace strata::neon_dotprod {
// The same integer-code dots with SDOT (dot_neon_dotprod.cpp, +dotprod).
void fill_dots(KernelTable& t);
}  // namespace strata::neon_dotprod
