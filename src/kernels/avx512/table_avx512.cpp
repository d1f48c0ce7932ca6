// AVX-512 F/BW/VL/DQ + VNNI kernel table (compiled with -mavx512*). Starts as a copy of the
// AVX2 table; overrides the formats with a VNNI kernel. These kernels have not been run on
// AVX-512 hardware yet; the golden tests cover them wherever kernel_table(Isa::Avx512) exists.
#include "kernels/avx512/kernels_avx512.h"
#include "kernels/kernel_table.h"

namespace strata {

void fill_avx512_table(KernelTable& t) {
  t.isa = Isa::Avx512;
  t.name = "avx512";
  t.vec_dot[static_cast<uint32_t>(GgmlType::Q8_0)] = avx512::vec_dot_q8_0_q8_0;
  t.vec_dot[static_cast<uint32_t>(GgmlType::Q4_0)] = avx512::vec_dot_q4_0_q8_0;
  t.vec_dot[static_cast<uint32_t>(GgmlType::Q4_K)] = avx512::vec_dot_q4_K_q8_K;
  t.vec_dot[static_cast<uint32_t>(GgmlType::Q6_K)] = avx512::vec_dot_q6_K_q8_K;
}

}  // namespace strata
