#pragma once
// Threaded matrix-vector / small matrix-matrix product over quantized weights:
//   y[t, r] = sum_c W[r, c] * x[t, c]
// Activations are converted once per call to the weight type's activation format; weight rows
// are handed to threads in chunks of consecutive rows and every row is dotted with all n activation
// rows while it is in cache, so the weights stream from DRAM once for the n tokens.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "gguf/ggml_type.h"
#include "gguf/qmatrix.h"
#include "kernels/kernel_table.h"

namespace strata {

// Units of work handed to threads: consecutive weight rows of about kMatmulChunkBytes (matmul),
// or of kMatmulManyChunkBytes of weight bytes x tokens (matmul_many, whose products are small).
inline constexpr int64_t kMatmulChunkBytes = 128 * 1024;
inline constexpr int64_t kMatmulManyChunkBytes = 64 * 1024;

// Buffer for the quantized activations; grows on the first call that needs more, then is
// reused (no allocation on the hot path). One per concurrent caller.
struct MatmulScratch {
  std::vector<uint8_t> act;  // [n, ggml_row_size(act_type, cols)]
  std::vector<float> tile;   // GemmBackend::Blas: [threads, tile rows, cols] dequantized weights
};

// How matmul computes prompt-size products (n >= kBlasMinTokens tokens):
//   Int8 (default): activations quantized to the weight type's vec_dot_type, multi-token int8
//     kernels; every token's result is llama.cpp's to the bit (the golden tests need this).
//   Blas: weight tiles dequantized to f32, OpenBLAS sgemm against the f32 activations (no
//     activation rounding, so results differ from llama.cpp's in the last bits). Opt-in
//     (--gemm blas): faster for Q8_0 weights at >= 128 tokens, about even for K-quants,
//     slower below ~128 tokens (bench_kernels gemm/ cases); smaller products keep the int8 path.
enum class GemmBackend { Int8, Blas };
inline constexpr int64_t kBlasMinTokens = 128;
bool gemm_blas_built();      // the build found OpenBLAS
bool gemm_blas_available();  // built with OpenBLAS, and the library loads (at the first call)
// Process-wide, like select_isa(); throws for Blas when gemm_blas_available() is false.
void select_gemm_backend(GemmBackend b);
GemmBackend gemm_backend();
GemmBackend parse_gemm_backend(const char* name);  // "int8" | "blas"
// True when matmul() takes matmul_blas() for this product (Blas selected, n >= kBlasMinTokens,
// non-f32 weights the table can dequantize).
bool matmul_blas_applies(const KernelTable& k, const QMatrix& w, int64_t n);
// The Blas product: y [n, rows] = x [n, cols] * W^T. pool: tiles handed to its threads, each
// calling a single-threaded sgemm; nullptr: all tiles on the caller (OpenBLAS then uses its
// own thread count).
void matmul_blas(const KernelTable& k, ThreadPool* pool, const QMatrix& w, const float* x, int64_t n, float* y,
                 MatmulScratch& s);

// The activation format matmul feeds to vec_dot for weight type `w` (ggml's vec_dot_type).
GgmlType matmul_act_type(GgmlType w);

// x: [n, cols] f32 (row-major); y: [n, rows] f32. pool may be nullptr (single thread).
// Throws strata::Error when the table has no kernel for the type or cols is not a multiple
// of the block size.
// in_gemm: nullptr, or [n] flags marking the activation rows llama.cpp computes inside a
// multi-token GEMM (a prompt chunk, not a lone decode token). For f32 weights of suitable shape
// those rows take its tiled GEMM's float association (dot_f32_x8), the others its dot's, so
// logits agree with llama.cpp's to the bit in both phases and never depend on batch partners.
void matmul(const KernelTable& k, ThreadPool* pool, const QMatrix& w, const float* x, int64_t n, float* y,
            MatmulScratch& s, const uint8_t* in_gemm = nullptr);

}  // namespace strata

namespace strata {

// One product of a matmul_many() call: y[t, r] = sum_c w[r, c] * x[t, c] for t < n.
struct MatmulJob {
  QMatrix w;
  const float* x = nullptr;  // [n, w.cols]
  int64_t n = 0;
  float* y = nullptr;        // [n, w.rows]
  const uint8_t* in_gemm = nullptr;  // as matmul()'s
  // nullptr, or x already in matmul_act_type(w.type)'s format, [n, ggml_row_size(that, w.cols)]
  // (then x is not read): callers that quantize a row once for several products.
  const uint8_t* xq = nullptr;
};
struct MatmulManyScratch {
  std::vector<std::vector<uint8_t>> act;  // per job: quantized activations (reused by later jobs on the same x)
  std::vector<int64_t> first_chunk;       // [n_jobs + 1] prefix sums of row chunks
};
// Several independent products in one pass of the thread pool (e.g. the gate and up matrices
// of every expert a decoding token uses): row chunks of all jobs are handed out from one
// counter, so small products do not each pay a dispatch and threads stay balanced. Every
// y element is the same float matmul() computes.
void matmul_many(const KernelTable& k, ThreadPool* pool, const MatmulJob* jobs, int n_jobs, MatmulManyScratch& s);

}  // namespace strata
