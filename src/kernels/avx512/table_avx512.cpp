// AVX-512 F/BW/VL/DQ + VNNI kernel table (compiled with -mavx512*).
#include "kernels/kernel_table.h"

namespace strata {

void fill_avx512_table(KernelTable& t) {
  t.isa = Isa::Avx512;
  t.name = "avx512";
}

}  // namespace strata
