#pragma once
// AVX-512 VNNI kernels, registered in table_avx512.cpp (untested on hardware so far).
#include <cstdint>

namespace strata::avx512 {

float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* a);
float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* a);
float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_q6_K_q8_K(int64_t n, const void* w, const void* a);

}  // namespace strata::avx512
