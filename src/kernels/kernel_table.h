#pragma once
// One table of kernels per ISA, compiled in separate translation units with their own flags
// and picked once at start-up by probing the CPU. The scalar table is the reference every
// other table is tested against. Entries an ISA does not specialize point at the scalar ones.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/cpu_features.h"
#include "gguf/ggml_type.h"
#include "kernels/quants.h"

namespace strata {

// Multi-token dot: weight row `w` (n values) against n_tok activation rows in the weight
// type's vec_dot_type, row t at (const uint8_t*)a + t * a_stride; writes token t's result to
// y[t * y_stride]. Contract: y[t * y_stride] is bit-identical to vec_dot(n, w, row t) of the
// same table, for every t and any n_tok >= 1 (a token's result never depends on its batch).
using VecDotXnFn = void (*)(int64_t n, const void* w, const void* a, size_t a_stride, int n_tok, float* y,
                            int64_t y_stride);
// Tile of weight rows x tokens: n_rows weight rows, row r at (const uint8_t*)w + r * w_stride,
// against n_tok activation rows as for VecDotXnFn; writes (row r, token t) to y[t * y_stride + r].
// Contract: every element is bit-identical to vec_dot(n, row r, token t) of the same table, for
// any n_rows >= 1 and n_tok >= 1 (a result never depends on its tile partners).
using VecDotTileFn = void (*)(int64_t n, const void* w, size_t w_stride, int n_rows, const void* a, size_t a_stride,
                              int n_tok, float* y, int64_t y_stride);

// AvxVnni: 256-bit VNNI kernels, VEX-encoded on AVX-VNNI CPUs and EVEX-encoded on AVX-512
// VNNI ones. Auto-selection prefers Avx512, then AvxVnni, then Avx2.
// ARM64: Neon (ARMv8-A Advanced SIMD) and NeonDotprod (+ SDOT, ARMv8.2), preferred in the
// reverse order; both give the Avx2 table's bits (llama.cpp's association). No i8mm table:
// that association rounds each 4-byte integer sum on its own, and SMMLA only makes 8-byte sums.
// A build holds the tables of its own architecture only: the others are never supported.
enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2, AvxVnni = 3, Neon = 4, NeonDotprod = 5 };
inline constexpr int kIsaCount = 6;
// Every table, and every table but the scalar one (for tests and tools that go over them).
inline constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::AvxVnni, Isa::Neon, Isa::NeonDotprod};
inline constexpr Isa kSimdIsas[] = {Isa::Avx2, Isa::Avx512, Isa::AvxVnni, Isa::Neon, Isa::NeonDotprod};
const char* isa_name(Isa isa);

struct KernelTable {
  Isa isa = Isa::Scalar;
  const char* name = "scalar";
  // Indexed by weight GgmlType: dot of a weight row with an activation row in the weight
  // type's vec_dot_type (quant_traits(t).vec_dot_type).
  VecDotFn vec_dot[kGgmlTypeCount] = {};
  // Indexed by weight GgmlType: the same dot for several tokens at once, each weight block
  // unpacked once (prompt-size GEMM). nullptr: none, matmul then loops vec_dot per token (the
  // scalar fallback). A non-null entry is always paired with this table's vec_dot entry.
  VecDotXnFn vec_dot_xn[kGgmlTypeCount] = {};
  // Indexed by weight GgmlType: several rows x several tokens at once, each decoded weight block
  // reused across the tokens and each activation load across the rows. nullptr: none (matmul
  // calls vec_dot_xn row by row). A non-null entry is always paired with this table's vec_dot_xn.
  VecDotTileFn vec_dot_tile[kGgmlTypeCount] = {};
  // Indexed by activation GgmlType (F16, BF16, Q8_0, Q8_1, Q8_K): f32 -> that format.
  FromFloatFn quantize_act[kGgmlTypeCount] = {};
  // Indexed by weight GgmlType: rows -> f32 (for prompt-size GEMM tiles and embeddings).
  ToFloatFn dequantize[kGgmlTypeCount] = {};

  // Float ops on contiguous vectors.
  float (*dot_f32)(int64_t n, const float* a, const float* b) = nullptr;
  // The f32 dot of llama.cpp's batched f32 GEMM (one 8-lane fused multiply-add accumulator
  // over steps of 8, then the horizontal sum); n must be a multiple of 8.
  float (*dot_f32_x8)(int64_t n, const float* a, const float* b) = nullptr;
  void (*axpy_f32)(int64_t n, float a, const float* x, float* y) = nullptr;  // y += a*x
  void (*scale_f32)(int64_t n, float a, float* y) = nullptr;                 // y *= a
  // y[i] = ggml_vexpf(x[i]) (kernels/ops.h: ggml's vectorized expf, which SwiGLU, SiLU and softmax
  // round through), bit for bit in every table; x and y may alias.
  void (*expf_f32)(int64_t n, const float* x, float* y) = nullptr;
  // f16 rows (KV cache) against f32: converted in registers, no row buffer.
  float (*dot_f16_f32)(int64_t n, const uint16_t* a, const float* b) = nullptr;
  void (*axpy_f16)(int64_t n, float a, const uint16_t* x, float* y) = nullptr;  // y += a*x
  // Grouped-query attention, m query heads sharing one KV head, each f16 row converted once:
  // out[q] = dot_f16_f32(n, a, b[q]) for q < m; and the value sums y[q][0..dv) = 0, then for
  // each key j ascending with w[q*w_stride + j] != 0, y[q] += w * v_j (v_j = v + j*v_stride),
  // bit for bit as dot_f16_f32 and repeated axpy_f16 (accumulators stay in registers).
  void (*dot_f16_f32_multi)(int64_t n, const uint16_t* a, const float* const* b, int m, float* out) = nullptr;
  void (*vsum_f16_multi)(int64_t n_keys, int64_t dv, const uint16_t* v, int64_t v_stride, const float* w, int64_t w_stride, float* const* y,
                         int m) = nullptr;
};

// Table for an ISA, or nullptr when the ISA is not compiled in or not supported by this CPU.
// A table is filled only when its ISA is supported: its code is compiled for that ISA, and no
// byte of it runs before the CPU check says yes.
const KernelTable* kernel_table(Isa isa);
// The CPU or OS features a table needs that this machine lacks, space-separated ("" when the
// table can run), e.g. "avx512f avx512bw os-avx512-state".
std::string isa_missing(Isa isa);
// The same for a given set of features (tests describe CPUs they do not run on).
std::string isa_missing(const CpuFeatures& f, Isa isa);
// The best table for this CPU, or the one forced with select_isa().
const KernelTable& kernels();
// The table in use and why, for reports and bug reports: "avx2 (auto: no avx512f, no avxvnni)",
// "avx512 (auto: best available)", "scalar (forced: --isa)".
std::string kernel_choice();
// Forces an ISA (--isa); throws, naming the missing features, if this CPU lacks them.
void select_isa(Isa isa);
// Parses "scalar" | "avx2" | "avxvnni" | "avx512" | "neon" | "neon-dotprod" | "auto".
Isa parse_isa(const char* name);

// Per-ISA constructors (each defined in its own translation unit).
void fill_scalar_table(KernelTable& t);
void fill_avx2_table(KernelTable& t);
void fill_avx512_table(KernelTable& t);
void fill_avxvnni_table(KernelTable& t);
void fill_neon_table(KernelTable& t);
void fill_neon_dotprod_table(KernelTable& t);

}  // namespace strata
