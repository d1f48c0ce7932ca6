// NEON kernel tables (ARM64). Entries not set here stay the scalar ones (the i-quant grids and
// ternary types, whose scalar dots already give llama.cpp's AVX2 bits, and the dequantizers).
// Compiled at the ARMv8-A baseline: it only picks functions.
#include "kernels/kernel_table.h"
#include "kernels/neon/kernels_neon.h"

namespace strata {

void fill_neon_table(KernelTable& t) {
  t.isa = Isa::Neon;
  t.name = "neon";
  neon::fill_float(t);
  neon::fill_dots(t);
}

// The NEON table (its parent) with the integer-code dots replaced by their SDOT form.
void fill_neon_dotprod_table(KernelTable& t) {
  t.isa = Isa::NeonDotprod;
  t.name = "neon-dotprod";
  neon_dotprod::fill_dots(t);
}

}  // namespace strata
