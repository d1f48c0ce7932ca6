#pragma once
// Dots of llama.cpp's tiled GEMM (tinyBLAS) where it rounds differently from its vec_dot, for
// the rows matmul() is told llama.cpp computes inside a multi-token GEMM (in_gemm).
#include <cstdint>

namespace strata {

// IQ4_NL x Q8_0 as llama.cpp's tiled GEMM computes it for the tokens of a multi-token product
// (one accumulator, blocks in order), where its vec_dot -- the kernel tables' entry, also what
// its expert products (mul_mat_id) use -- sums even and odd blocks apart. Exact integer lanes
// and fused multiply-adds (kernels/scalar/quants_iq.cpp): the same bits on every CPU.
float vec_dot_iq4_nl_q8_0_gemm(int64_t n, const void* w, const void* a);

}  // namespace strata
