#pragma once
// AVX-512 (F/BW/VL/DQ + VNNI) kernels, registered in table_avx512.cpp. Each is bit-identical to
// the AVX2 kernel of the same name (tests/kernels/test_avx512.cpp).
#include <cstddef>
#include <cstdint>

namespace strata::avx512 {

float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_q5_K_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_q6_K_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_iq4_xs_q8_K(int64_t n, const void* w, const void* a);

void vec_dot_xn_q4_K_q8_K(int64_t n, const void* w, const void* a, size_t as, int nt, float* y, int64_t ys);
void vec_dot_xn_q5_K_q8_K(int64_t n, const void* w, const void* a, size_t as, int nt, float* y, int64_t ys);
void vec_dot_xn_q6_K_q8_K(int64_t n, const void* w, const void* a, size_t as, int nt, float* y, int64_t ys);
void vec_dot_xn_iq4_xs_q8_K(int64_t n, const void* w, const void* a, size_t as, int nt, float* y, int64_t ys);

// Rows x tokens tiles of the grid i-quants (dot_iq_avx512.cpp), bit-identical per element to the
// table's single-token dots (the EVEX VNNI ones, equal to AVX2's).
void vec_dot_tile_iq2_xxs_q8_K(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as, int nt, float* y, int64_t ys);
void vec_dot_tile_iq2_xs_q8_K(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as, int nt, float* y, int64_t ys);
void vec_dot_tile_iq2_s_q8_K(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as, int nt, float* y, int64_t ys);
void vec_dot_tile_iq3_xxs_q8_K(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as, int nt, float* y, int64_t ys);
void vec_dot_tile_iq3_s_q8_K(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as, int nt, float* y, int64_t ys);

}  // namespace strata::avx512
