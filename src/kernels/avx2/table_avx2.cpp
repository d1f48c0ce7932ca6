// AVX2 + FMA + F16C kernel table (compiled with -mavx2 -mfma -mf16c).
#include "kernels/kernel_table.h"

namespace strata {

void fill_avx2_table(KernelTable& t) {
  t.isa = Isa::Avx2;
  t.name = "avx2";
}

}  // namespace strata
