// AVX2 + FMA + F16C kernel table (compiled with -mavx2 -mfma -mf16c). Entries not set here
// stay the scalar ones.
#include "kernels/avx2/kernels_avx2.h"
#include "kernels/kernel_table.h"

namespace strata {

void fill_avx2_table(KernelTable& t) {
  t.isa = Isa::Avx2;
  t.name = "avx2";
  auto set_dot = [&](GgmlType w, VecDotFn f) { t.vec_dot[static_cast<uint32_t>(w)] = f; };
  set_dot(GgmlType::Q4_0, avx2::vec_dot_q4_0_q8_0);
  set_dot(GgmlType::Q4_1, avx2::vec_dot_q4_1_q8_1);
  set_dot(GgmlType::Q5_0, avx2::vec_dot_q5_0_q8_0);
  set_dot(GgmlType::Q5_1, avx2::vec_dot_q5_1_q8_1);
  set_dot(GgmlType::Q8_0, avx2::vec_dot_q8_0_q8_0);
  set_dot(GgmlType::IQ4_NL, avx2::vec_dot_iq4_nl_q8_0);
  set_dot(GgmlType::MXFP4, avx2::vec_dot_mxfp4_q8_0);
  set_dot(GgmlType::Q2_K, avx2::vec_dot_q2_K_q8_K);
  set_dot(GgmlType::Q3_K, avx2::vec_dot_q3_K_q8_K);
  set_dot(GgmlType::Q4_K, avx2::vec_dot_q4_K_q8_K);
  set_dot(GgmlType::Q5_K, avx2::vec_dot_q5_K_q8_K);
  set_dot(GgmlType::Q6_K, avx2::vec_dot_q6_K_q8_K);
  set_dot(GgmlType::IQ4_XS, avx2::vec_dot_iq4_xs_q8_K);
  set_dot(GgmlType::IQ2_XXS, avx2::vec_dot_iq2_xxs_q8_K);
  set_dot(GgmlType::IQ2_XS, avx2::vec_dot_iq2_xs_q8_K);
  set_dot(GgmlType::IQ3_XXS, avx2::vec_dot_iq3_xxs_q8_K);
  set_dot(GgmlType::IQ1_S, avx2::vec_dot_iq1_s_q8_K);
  set_dot(GgmlType::IQ2_S, avx2::vec_dot_iq2_s_q8_K);
  set_dot(GgmlType::IQ3_S, avx2::vec_dot_iq3_s_q8_K);
  set_dot(GgmlType::IQ1_M, avx2::vec_dot_iq1_m_q8_K);
  set_dot(GgmlType::TQ1_0, avx2::vec_dot_tq1_0_q8_K);
  set_dot(GgmlType::TQ2_0, avx2::vec_dot_tq2_0_q8_K);
  set_dot(GgmlType::F16, avx2::vec_dot_f16_f16);
  set_dot(GgmlType::BF16, avx2::vec_dot_bf16_bf16);
  set_dot(GgmlType::F32, avx2::vec_dot_f32_f32);

  auto set_xn = [&](GgmlType w, VecDotXnFn f) { t.vec_dot_xn[static_cast<uint32_t>(w)] = f; };
  set_xn(GgmlType::Q4_0, avx2::vec_dot_xn_q4_0_q8_0);
  set_xn(GgmlType::Q8_0, avx2::vec_dot_xn_q8_0_q8_0);
  set_xn(GgmlType::IQ4_NL, avx2::vec_dot_xn_iq4_nl_q8_0);
  set_xn(GgmlType::MXFP4, avx2::vec_dot_xn_mxfp4_q8_0);
  set_xn(GgmlType::Q4_K, avx2::vec_dot_xn_q4_K_q8_K);
  set_xn(GgmlType::Q5_K, avx2::vec_dot_xn_q5_K_q8_K);
  set_xn(GgmlType::Q6_K, avx2::vec_dot_xn_q6_K_q8_K);
  set_xn(GgmlType::IQ4_XS, avx2::vec_dot_xn_iq4_xs_q8_K);
  set_xn(GgmlType::IQ2_XXS, avx2::vec_dot_xn_iq2_xxs_q8_K);
  set_xn(GgmlType::IQ2_XS, avx2::vec_dot_xn_iq2_xs_q8_K);
  set_xn(GgmlType::IQ3_XXS, avx2::vec_dot_xn_iq3_xxs_q8_K);
  set_xn(GgmlType::IQ1_S, avx2::vec_dot_xn_iq1_s_q8_K);
  set_xn(GgmlType::IQ2_S, avx2::vec_dot_xn_iq2_s_q8_K);
  set_xn(GgmlType::IQ3_S, avx2::vec_dot_xn_iq3_s_q8_K);
  set_xn(GgmlType::IQ1_M, avx2::vec_dot_xn_iq1_m_q8_K);
  set_xn(GgmlType::TQ1_0, avx2::vec_dot_xn_tq1_0_q8_K);
  set_xn(GgmlType::TQ2_0, avx2::vec_dot_xn_tq2_0_q8_K);

  auto set_tile = [&](GgmlType w, VecDotTileFn f) { t.vec_dot_tile[static_cast<uint32_t>(w)] = f; };
  set_tile(GgmlType::IQ2_XXS, avx2::vec_dot_tile_iq2_xxs_q8_K);
  set_tile(GgmlType::IQ2_XS, avx2::vec_dot_tile_iq2_xs_q8_K);
  set_tile(GgmlType::IQ2_S, avx2::vec_dot_tile_iq2_s_q8_K);
  set_tile(GgmlType::IQ3_XXS, avx2::vec_dot_tile_iq3_xxs_q8_K);
  set_tile(GgmlType::IQ3_S, avx2::vec_dot_tile_iq3_s_q8_K);

  auto set_act = [&](GgmlType a, FromFloatFn f) { t.quantize_act[static_cast<uint32_t>(a)] = f; };
  set_act(GgmlType::Q8_0, avx2::quantize_q8_0);
  set_act(GgmlType::Q8_1, avx2::quantize_q8_1);
  set_act(GgmlType::Q8_K, avx2::quantize_q8_K);
  set_act(GgmlType::F16, avx2::quantize_f16);
  set_act(GgmlType::BF16, avx2::quantize_bf16);

  auto set_deq = [&](GgmlType w, ToFloatFn f) { t.dequantize[static_cast<uint32_t>(w)] = f; };
  set_deq(GgmlType::Q8_0, avx2::dequantize_q8_0);
  set_deq(GgmlType::Q4_0, avx2::dequantize_q4_0);
  set_deq(GgmlType::Q4_K, avx2::dequantize_q4_K);
  set_deq(GgmlType::Q6_K, avx2::dequantize_q6_K);
  set_deq(GgmlType::F16, avx2::dequantize_f16);
  set_deq(GgmlType::BF16, avx2::dequantize_bf16);

  t.dot_f32 = avx2::dot_f32;
  t.dot_f32_x8 = avx2::dot_f32_x8;
  t.axpy_f32 = avx2::axpy_f32;
  t.scale_f32 = avx2::scale_f32;
  t.expf_f32 = avx2::expf_f32;
  t.dot_f16_f32 = avx2::dot_f16_f32;
  t.axpy_f16 = avx2::axpy_f16;
  t.dot_f16_f32_multi = avx2::dot_f16_f32_multi;
  t.vsum_f16_multi = avx2::vsum_f16_multi;
}

}  // namespace strata
