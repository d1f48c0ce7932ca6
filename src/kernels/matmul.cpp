#include "kernels/matmul.h"

#include <algorithm>
#include <array>
#include <atomic>

#include "core/error.h"
#include "kernels/quants_gemm.h"

namespace strata {

namespace {

// ggml's vec_dot_type per weight type (part of the format contract: the golden fixtures record
// it), for the types the SIMD tables implement. kUnlisted: not in this table.
constexpr auto kUnlisted = static_cast<GgmlType>(kGgmlTypeCount);
constexpr std::array<GgmlType, kGgmlTypeCount> make_act_types() {
  std::array<GgmlType, kGgmlTypeCount> a{};
  for (auto& t : a) t = kUnlisted;
  auto set = [&](GgmlType w, GgmlType act) { a[static_cast<uint32_t>(w)] = act; };
  for (GgmlType w : {GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::IQ4_NL, GgmlType::MXFP4})
    set(w, GgmlType::Q8_0);
  for (GgmlType w : {GgmlType::Q4_1, GgmlType::Q5_1}) set(w, GgmlType::Q8_1);
  for (GgmlType w : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS,
                     GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S,
                     GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::TQ1_0, GgmlType::TQ2_0})
    set(w, GgmlType::Q8_K);
  set(GgmlType::F16, GgmlType::F16);
  set(GgmlType::BF16, GgmlType::BF16);
  set(GgmlType::F32, GgmlType::F32);
  return a;
}
constexpr auto kActTypes = make_act_types();

// Tokens dotted per weight row before moving on (their activations stay in L1/L2).
constexpr int64_t kTokenTile = 16;
// The same for rows x tokens tile kernels, which decode each weight block once per call: more
// tokens per call amortize the decoding (their activations are read a few blocks at a time;
// 128 tokens of a 2048-wide Q8_K activation are ~300 KB, inside L2). 32 -> 128 measured
// bench_kernels gemm/iq3_s/4096x2048/n128 i8-512 -30 %.
constexpr int64_t kTileTokenTile = 128;
// Bytes of weight rows kept hot while the token tiles cycle (only matters for n > kTokenTile).
constexpr int64_t kRowTileBytes = 256 * 1024;
// Activations are quantized by the pool's threads only from this many values on (tokens x
// columns); below, the caller quantizes them alone: a prompt's expert products (~32 tokens) do
// not pay a second thread-pool pass (a barrier) for tens of microseconds of work.
constexpr int64_t kParallelQuantValues = 128 * 1024;

}  // namespace

GgmlType matmul_act_type(GgmlType w) {
  const auto i = static_cast<uint32_t>(w);
  STRATA_CHECK(i < kGgmlTypeCount, "invalid ggml type id {}", i);
  // A format registered by the scalar reference (quant traits) is authoritative; for the
  // formats listed above both must agree.
  const QuantTraits& q = quant_traits(w);
  if (q.vec_dot) {
    STRATA_CHECK(kActTypes[i] == kUnlisted || q.vec_dot_type == kActTypes[i],
                 "activation type mismatch for {}: traits say {}, matmul expects {}", ggml_type_name(w),
                 ggml_type_name(q.vec_dot_type), ggml_type_name(kActTypes[i]));
    return q.vec_dot_type;
  }
  STRATA_CHECK(kActTypes[i] != kUnlisted, "matmul: no kernel for weight type {}", ggml_type_name(w));
  return kActTypes[i];
}

void matmul(const KernelTable& k, ThreadPool* pool, const QMatrix& w, const float* x, int64_t n, float* y,
            MatmulScratch& s, const uint8_t* in_gemm) {
  if (n <= 0 || w.rows <= 0) return;
  if (matmul_blas_applies(k, w, n)) {
    matmul_blas(k, pool, w, x, n, y, s);
    return;
  }
  const GgmlType at = matmul_act_type(w.type);
  const VecDotFn dot = k.vec_dot[static_cast<uint32_t>(w.type)];
  // f32 weights: llama.cpp's CPU build takes its tiled f32 GEMM (tinyBLAS) for multi-token
  // batches when the shapes allow (K a multiple of 8, rows a multiple of 4).
  const auto f32_gemm = (in_gemm && w.type == GgmlType::F32 && w.cols % 8 == 0 && w.rows % 4 == 0) ? k.dot_f32_x8 : nullptr;
  // IQ4_NL likewise (llama.cpp takes its tiled GEMM for any shape there): the GEMM sums the
  // blocks in one accumulator, its vec_dot in two. The other quantized types' GEMM rounds as
  // their vec_dot.
  const VecDotFn q_gemm = (in_gemm && w.type == GgmlType::IQ4_NL) ? vec_dot_iq4_nl_q8_0_gemm : nullptr;
  STRATA_CHECK(dot != nullptr, "kernel table '{}' has no vec_dot for {}", k.name, ggml_type_name(w.type));
  // Several tokens: the multi-token kernel (bit-identical per token to `dot`) when the table has one.
  const VecDotXnFn dot_xn = (n >= 2 && !f32_gemm && !q_gemm) ? k.vec_dot_xn[static_cast<uint32_t>(w.type)] : nullptr;
  // ... and the rows x tokens tile kernel (bit-identical per element to `dot` too).
  const VecDotTileFn dot_tile = dot_xn ? k.vec_dot_tile[static_cast<uint32_t>(w.type)] : nullptr;
  const int64_t tok_tile = dot_tile ? kTileTokenTile : kTokenTile;
  const auto& wi = ggml_info(w.type);
  const auto& ai = ggml_info(at);
  STRATA_CHECK(w.cols % wi.block_size == 0 && w.cols % ai.block_size == 0,
               "matmul: {} columns is not a multiple of the {} / {} block size", w.cols, wi.name, ai.name);
  STRATA_CHECK(w.row_stride_bytes >= ggml_row_size(w.type, w.cols), "matmul: row stride {} < row size {}",
               w.row_stride_bytes, ggml_row_size(w.type, w.cols));

  // 1. Activations in the kernel's format (F32 weights read x directly).
  const uint8_t* act = reinterpret_cast<const uint8_t*>(x);
  size_t act_stride = static_cast<size_t>(w.cols) * sizeof(float);
  if (at != GgmlType::F32) {
    const FromFloatFn quant = k.quantize_act[static_cast<uint32_t>(at)];
    STRATA_CHECK(quant != nullptr, "kernel table '{}' has no activation quantizer for {}", k.name, ai.name);
    act_stride = ggml_row_size(at, w.cols);
    const size_t need = act_stride * static_cast<size_t>(n);
    if (s.act.size() < need) s.act.resize(need);
    uint8_t* dst = s.act.data();
    auto quant_rows = [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) quant(x + t * w.cols, dst + t * act_stride, w.cols);
    };
    if (pool && n >= 2 * pool->size() && n * w.cols >= kParallelQuantValues) pool->parallel_for(n, 1, quant_rows);
    else quant_rows(0, n, 0);
    act = dst;
  }

  // 2. Rows split across threads; each row is dotted with a tile of tokens while hot.
  const auto* wdata = static_cast<const uint8_t*>(w.data);
  const int64_t row_tile =
      n <= tok_tile ? w.rows : std::max<int64_t>(1, kRowTileBytes / static_cast<int64_t>(w.row_stride_bytes));
  auto rows_job = [&](int64_t rb, int64_t re, int) {
    for (int64_t r0 = rb; r0 < re; r0 += row_tile) {
      const int64_t r1 = std::min(re, r0 + row_tile);
      for (int64_t t0 = 0; t0 < n; t0 += tok_tile) {
        const int64_t t1 = std::min(n, t0 + tok_tile);
        if (dot_tile) {
          dot_tile(w.cols, wdata + static_cast<size_t>(r0) * w.row_stride_bytes, w.row_stride_bytes, static_cast<int>(r1 - r0),
                   act + t0 * act_stride, act_stride, static_cast<int>(t1 - t0), y + t0 * w.rows + r0, w.rows);
          continue;
        }
        for (int64_t r = r0; r < r1; ++r) {
          const uint8_t* wr = wdata + static_cast<size_t>(r) * w.row_stride_bytes;
          if (f32_gemm) {
            for (int64_t t = t0; t < t1; ++t) {
              const auto* a = reinterpret_cast<const float*>(act + t * act_stride);
              y[t * w.rows + r] = in_gemm[t] ? f32_gemm(w.cols, reinterpret_cast<const float*>(wr), a) : dot(w.cols, wr, a);
            }
          } else if (q_gemm) {
            for (int64_t t = t0; t < t1; ++t) {
              const uint8_t* a = act + t * act_stride;
              y[t * w.rows + r] = in_gemm[t] ? q_gemm(w.cols, wr, a) : dot(w.cols, wr, a);
            }
          } else if (dot_xn) {
            dot_xn(w.cols, wr, act + t0 * act_stride, act_stride, static_cast<int>(t1 - t0), y + t0 * w.rows + r, w.rows);
          } else {
            for (int64_t t = t0; t < t1; ++t) y[t * w.rows + r] = dot(w.cols, wr, act + t * act_stride);
          }
        }
      }
    }
  };
  // Chunks of ~kChunkBytes of weights handed out dynamically: a thread slowed down (shared
  // core, page faults) does not hold up the others, and each chunk is still one long
  // sequential stream for the hardware prefetchers.
  // Small matrices still get >= 4 chunks per thread so that all threads take part.
  if (!pool || pool->size() == 1) {
    rows_job(0, w.rows, 0);
    return;
  }
  const int64_t nt = pool->size();
  const int64_t chunk_rows = std::clamp<int64_t>(kMatmulChunkBytes / static_cast<int64_t>(w.row_stride_bytes), 1,
                                                 std::max<int64_t>(1, (w.rows + 4 * nt - 1) / (4 * nt)));
  const int64_t n_chunks = (w.rows + chunk_rows - 1) / chunk_rows;
  std::atomic<int64_t> next{0};
  pool->run([&](int tid) {
    for (int64_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < n_chunks;)
      rows_job(c * chunk_rows, std::min(w.rows, (c + 1) * chunk_rows), tid);
  });
}

}  // namespace strata
