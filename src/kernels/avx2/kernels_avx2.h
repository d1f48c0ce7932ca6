#pragma once
// AVX2 kernels, registered in table_avx2.cpp. Signatures are quants.h's VecDotFn / FromFloatFn.
#include <cstddef>
#include <cstdint>

namespace strata::avx2 {

// Weight x activation dot products (weight type _ activation type).
float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* a);
float vec_dot_q4_1_q8_1(int64_t n, const void* w, const void* a);
float vec_dot_q5_0_q8_0(int64_t n, const void* w, const void* a);
float vec_dot_q5_1_q8_1(int64_t n, const void* w, const void* a);
float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* a);
float vec_dot_iq4_nl_q8_0(int64_t n, const void* w, const void* a);
float vec_dot_mxfp4_q8_0(int64_t n, const void* w, const void* a);
float vec_dot_q2_K_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_q3_K_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_q5_K_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_q6_K_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_iq4_xs_q8_K(int64_t n, const void* w, const void* a);
// Grid i-quants (dot_iq_avx2.cpp) and ternary formats (dot_ternary_avx2.cpp): bit-identical
// to the scalar reference (llama.cpp's arithmetic).
float vec_dot_iq2_xxs_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_iq2_xs_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_iq2_s_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_iq3_xxs_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_iq3_s_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_iq1_s_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_iq1_m_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_tq1_0_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_tq2_0_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_f16_f16(int64_t n, const void* w, const void* a);
float vec_dot_bf16_bf16(int64_t n, const void* w, const void* a);
float vec_dot_f32_f32(int64_t n, const void* w, const void* a);

// Multi-token dots (kernel_table.h's VecDotXnFn), bit-identical to the ones above per token.
void vec_dot_xn_q4_0_q8_0(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys);
void vec_dot_xn_q8_0_q8_0(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys);
void vec_dot_xn_iq4_nl_q8_0(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys);
void vec_dot_xn_mxfp4_q8_0(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys);
void vec_dot_xn_q4_K_q8_K(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys);
void vec_dot_xn_q5_K_q8_K(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys);
void vec_dot_xn_q6_K_q8_K(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys);
void vec_dot_xn_iq4_xs_q8_K(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys);
void vec_dot_xn_iq2_xxs_q8_K(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys);
void vec_dot_xn_iq2_xs_q8_K(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys);
void vec_dot_xn_iq3_xxs_q8_K(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys);
void vec_dot_xn_iq1_s_q8_K(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys);
void vec_dot_xn_iq2_s_q8_K(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys);
void vec_dot_xn_iq3_s_q8_K(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys);
void vec_dot_xn_iq1_m_q8_K(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys);
void vec_dot_xn_tq1_0_q8_K(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys);
void vec_dot_xn_tq2_0_q8_K(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys);
// Rows x tokens tiles (kernel_table.h's VecDotTileFn), bit-identical to the ones above per element.
void vec_dot_tile_iq2_xxs_q8_K(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as, int nt, float* y, int64_t ys);
void vec_dot_tile_iq2_xs_q8_K(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as, int nt, float* y, int64_t ys);
void vec_dot_tile_iq2_s_q8_K(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as, int nt, float* y, int64_t ys);
void vec_dot_tile_iq3_xxs_q8_K(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as, int nt, float* y, int64_t ys);
void vec_dot_tile_iq3_s_q8_K(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as, int nt, float* y, int64_t ys);

// Activation quantizers (f32 -> vec_dot_type), round to nearest even like ggml's AVX2 path.
void quantize_q8_0(const float* x, void* y, int64_t n);
void quantize_q8_1(const float* x, void* y, int64_t n);
void quantize_q8_K(const float* x, void* y, int64_t n);
void quantize_f16(const float* x, void* y, int64_t n);
void quantize_bf16(const float* x, void* y, int64_t n);

// Dequantization of weight rows to f32 (bit-exact with ggml), n a multiple of the block size.
void dequantize_q8_0(const void* x, float* y, int64_t n);
void dequantize_q4_0(const void* x, float* y, int64_t n);
void dequantize_q4_K(const void* x, float* y, int64_t n);
void dequantize_q6_K(const void* x, float* y, int64_t n);
void dequantize_f16(const void* x, float* y, int64_t n);
void dequantize_bf16(const void* x, float* y, int64_t n);

// Float vector ops.
float dot_f32(int64_t n, const float* a, const float* b);
float dot_f32_x8(int64_t n, const float* a, const float* b);
void axpy_f32(int64_t n, float a, const float* x, float* y);
void expf_f32(int64_t n, const float* x, float* y);  // ggml's vectorized expf, 8 lanes (expf_avx2.cpp)
void scale_f32(int64_t n, float a, float* y);
float dot_f16_f32(int64_t n, const uint16_t* x, const float* y);
void axpy_f16(int64_t n, float a, const uint16_t* x, float* y);
void dot_f16_f32_multi(int64_t n, const uint16_t* x, const float* const* y, int m, float* out);
void vsum_f16_multi(int64_t n_keys, int64_t dv, const uint16_t* v, int64_t v_stride, const float* w, int64_t w_stride, float* const* y, int m);

}  // namespace strata::avx2
