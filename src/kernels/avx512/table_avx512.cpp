// AVX-512 F/BW/VL/DQ + VNNI kernel table (compiled with -mavx512*). Starts as a copy of the
// AVX2 table and overrides the formats MoE models are made of, one token and several, with
// 512-bit integer kernels whose results are bit-identical to the AVX2 ones.
#include "kernels/avx512/kernels_avx512.h"
#include "kernels/kernel_table.h"

namespace strata {

void fill_avx512_table(KernelTable& t) {
  t.isa = Isa::Avx512;
  t.name = "avx512";
  auto set = [&](GgmlType w, VecDotFn dot, VecDotXnFn xn) {
    t.vec_dot[static_cast<uint32_t>(w)] = dot;
    t.vec_dot_xn[static_cast<uint32_t>(w)] = xn;
  };
  set(GgmlType::Q4_K, avx512::vec_dot_q4_K_q8_K, avx512::vec_dot_xn_q4_K_q8_K);
  set(GgmlType::Q5_K, avx512::vec_dot_q5_K_q8_K, avx512::vec_dot_xn_q5_K_q8_K);
  set(GgmlType::Q6_K, avx512::vec_dot_q6_K_q8_K, avx512::vec_dot_xn_q6_K_q8_K);
  set(GgmlType::IQ4_XS, avx512::vec_dot_iq4_xs_q8_K, avx512::vec_dot_xn_iq4_xs_q8_K);
  set(GgmlType::Q8_0, avx512::vec_dot_q8_0_q8_0, avx512::vec_dot_xn_q8_0_q8_0);
  set(GgmlType::Q4_0, avx512::vec_dot_q4_0_q8_0, avx512::vec_dot_xn_q4_0_q8_0);
  set(GgmlType::IQ4_NL, avx512::vec_dot_iq4_nl_q8_0, avx512::vec_dot_xn_iq4_nl_q8_0);
  set(GgmlType::MXFP4, avx512::vec_dot_mxfp4_q8_0, avx512::vec_dot_xn_mxfp4_q8_0);
}

}  // namespace strata
