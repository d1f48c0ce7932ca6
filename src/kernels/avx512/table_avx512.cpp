// AVX-512 F/BW/VL/DQ + VNNI kernel table. Starts as a copy of the AVX2 table; the formats MoE
// models are made of, one token and several, take VNNI kernels whose results are bit-identical
// to the AVX2 ones: 512-bit for the super-block formats, the 256-bit (EVEX) ones of the AVX-VNNI
// table for the 32-value block formats (measured at least as fast there). The grid i-quants take
// the EVEX VNNI kernels plus 512-bit rows x tokens tiles (two rows per register).
#include "kernels/avx512/kernels_avx512.h"
#include "kernels/avxvnni/kernels_avxvnni.h"
#include "kernels/kernel_table.h"

namespace strata {

void fill_avx512_table(KernelTable& t) {
  t.isa = Isa::Avx512;
  t.name = "avx512";
  avxvnni_evex::fill_kernels(t);
  auto set = [&](GgmlType w, VecDotFn dot, VecDotXnFn xn) {
    t.vec_dot[static_cast<uint32_t>(w)] = dot;
    t.vec_dot_xn[static_cast<uint32_t>(w)] = xn;
  };
  set(GgmlType::Q4_K, avx512::vec_dot_q4_K_q8_K, avx512::vec_dot_xn_q4_K_q8_K);
  set(GgmlType::Q5_K, avx512::vec_dot_q5_K_q8_K, avx512::vec_dot_xn_q5_K_q8_K);
  set(GgmlType::Q6_K, avx512::vec_dot_q6_K_q8_K, avx512::vec_dot_xn_q6_K_q8_K);
  set(GgmlType::IQ4_XS, avx512::vec_dot_iq4_xs_q8_K, avx512::vec_dot_xn_iq4_xs_q8_K);
  // The grid i-quants keep the EVEX VNNI one- and multi-token kernels and get 512-bit tiles.
  t.vec_dot_tile[static_cast<uint32_t>(GgmlType::IQ2_XXS)] = avx512::vec_dot_tile_iq2_xxs_q8_K;
  t.vec_dot_tile[static_cast<uint32_t>(GgmlType::IQ2_XS)] = avx512::vec_dot_tile_iq2_xs_q8_K;
  t.vec_dot_tile[static_cast<uint32_t>(GgmlType::IQ2_S)] = avx512::vec_dot_tile_iq2_s_q8_K;
  t.vec_dot_tile[static_cast<uint32_t>(GgmlType::IQ3_XXS)] = avx512::vec_dot_tile_iq3_xxs_q8_K;
  t.vec_dot_tile[static_cast<uint32_t>(GgmlType::IQ3_S)] = avx512::vec_dot_tile_iq3_s_q8_K;
}

}  // namespace strata
