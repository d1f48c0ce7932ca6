// Several small products in one thread-pool pass (see matmul.h).
#include <algorithm>
#include <atomic>

#include "core/error.h"
#include "kernels/matmul.h"
#include "kernels/quants_gemm.h"

namespace strata {

void matmul_many(const KernelTable& k, ThreadPool* pool, const MatmulJob* jobs, int n_jobs, MatmulManyScratch& s) {
  if (n_jobs <= 0) return;
  if (static_cast<int>(s.act.size()) < n_jobs) s.act.resize(static_cast<size_t>(n_jobs));
  s.first_chunk.resize(static_cast<size_t>(n_jobs) + 1);
  // 1. Activations per job in the weight type's format; a job on the same input and format
  //    as an earlier one reuses its buffer.
  struct Prepared {
    VecDotFn dot;
    VecDotXnFn dot_xn;  // several tokens at once (bit-identical per token to dot), or nullptr
    VecDotTileFn dot_tile;  // rows x tokens (bit-identical per element to dot), or nullptr
    float (*f32_gemm)(int64_t, const float*, const float*);
    VecDotFn q_gemm;  // IQ4_NL rows in llama.cpp's tiled GEMM (see matmul.cpp)
    const uint8_t* act;
    size_t act_stride;
    int64_t chunk_rows;
  };
  Prepared prep[256];
  STRATA_CHECK(n_jobs <= 256, "matmul_many: {} jobs (at most 256)", n_jobs);
  int64_t chunks = 0;
  for (int j = 0; j < n_jobs; ++j) {
    const MatmulJob& jb = jobs[j];
    const GgmlType at = matmul_act_type(jb.w.type);
    Prepared& p = prep[j];
    p.dot = k.vec_dot[static_cast<uint32_t>(jb.w.type)];
    STRATA_CHECK(p.dot != nullptr, "kernel table '{}' has no vec_dot for {}", k.name, ggml_type_name(jb.w.type));
    const auto& wi = ggml_info(jb.w.type);
    const auto& ai = ggml_info(at);
    STRATA_CHECK(jb.w.cols % wi.block_size == 0 && jb.w.cols % ai.block_size == 0,
                 "matmul: {} columns is not a multiple of the {} / {} block size", jb.w.cols, wi.name, ai.name);
    STRATA_CHECK(jb.w.row_stride_bytes >= ggml_row_size(jb.w.type, jb.w.cols), "matmul: row stride {} < row size {}",
                 jb.w.row_stride_bytes, ggml_row_size(jb.w.type, jb.w.cols));
    p.f32_gemm = (jb.in_gemm && jb.w.type == GgmlType::F32 && jb.w.cols % 8 == 0 && jb.w.rows % 4 == 0) ? k.dot_f32_x8 : nullptr;
    p.q_gemm = (jb.in_gemm && jb.w.type == GgmlType::IQ4_NL) ? vec_dot_iq4_nl_q8_0_gemm : nullptr;
    p.dot_xn = (jb.n >= 2 && !p.f32_gemm && !p.q_gemm) ? k.vec_dot_xn[static_cast<uint32_t>(jb.w.type)] : nullptr;
    p.dot_tile = p.dot_xn ? k.vec_dot_tile[static_cast<uint32_t>(jb.w.type)] : nullptr;
    p.act = reinterpret_cast<const uint8_t*>(jb.x);
    p.act_stride = static_cast<size_t>(jb.w.cols) * sizeof(float);
    if (at != GgmlType::F32 && jb.xq) {
      p.act_stride = ggml_row_size(at, jb.w.cols);
      p.act = jb.xq;
    } else if (at != GgmlType::F32) {
      p.act_stride = ggml_row_size(at, jb.w.cols);
      int same = -1;
      for (int i = 0; i < j && same < 0; ++i)
        if (!jobs[i].xq && jobs[i].x == jb.x && jobs[i].n >= jb.n && jobs[i].w.cols == jb.w.cols && matmul_act_type(jobs[i].w.type) == at) same = i;
      if (same >= 0) {
        p.act = prep[same].act;
      } else {
        const FromFloatFn quant = k.quantize_act[static_cast<uint32_t>(at)];
        STRATA_CHECK(quant != nullptr, "kernel table '{}' has no activation quantizer for {}", k.name, ai.name);
        auto& buf = s.act[static_cast<size_t>(j)];
        const size_t need = p.act_stride * static_cast<size_t>(jb.n);
        if (buf.size() < need) buf.resize(need);
        for (int64_t t = 0; t < jb.n; ++t) quant(jb.x + t * jb.w.cols, buf.data() + t * p.act_stride, jb.w.cols);
        p.act = buf.data();
      }
    }
    p.chunk_rows = std::clamp<int64_t>(kMatmulManyChunkBytes / static_cast<int64_t>(jb.w.row_stride_bytes * std::max<int64_t>(1, jb.n)), 1, jb.w.rows);
    // Tile kernels take rows a few at a time: chunks of a multiple of 4 rows keep them whole.
    if (p.dot_tile) p.chunk_rows = std::min<int64_t>(jb.w.rows, (p.chunk_rows + 3) / 4 * 4);
    s.first_chunk[static_cast<size_t>(j)] = chunks;
    chunks += jb.n > 0 ? (jb.w.rows + p.chunk_rows - 1) / p.chunk_rows : 0;
  }
  s.first_chunk[static_cast<size_t>(n_jobs)] = chunks;

  // 2. Work items = row chunks of all jobs, from one counter.
  auto item = [&](int64_t c) {
    const int j = static_cast<int>(std::upper_bound(s.first_chunk.begin(), s.first_chunk.begin() + n_jobs + 1, c) - s.first_chunk.begin()) - 1;
    const MatmulJob& jb = jobs[j];
    const Prepared& p = prep[j];
    const int64_t r0 = (c - s.first_chunk[static_cast<size_t>(j)]) * p.chunk_rows, r1 = std::min(jb.w.rows, r0 + p.chunk_rows);
    const auto* wdata = static_cast<const uint8_t*>(jb.w.data);
    if (p.dot_tile) {
      p.dot_tile(jb.w.cols, wdata + static_cast<size_t>(r0) * jb.w.row_stride_bytes, jb.w.row_stride_bytes, static_cast<int>(r1 - r0),
                 p.act, p.act_stride, static_cast<int>(jb.n), jb.y + r0, jb.w.rows);
      return;
    }
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* wr = wdata + static_cast<size_t>(r) * jb.w.row_stride_bytes;
      if (p.dot_xn) {
        p.dot_xn(jb.w.cols, wr, p.act, p.act_stride, static_cast<int>(jb.n), jb.y + r, jb.w.rows);
        continue;
      }
      for (int64_t t = 0; t < jb.n; ++t) {
        const uint8_t* a = p.act + t * p.act_stride;
        jb.y[t * jb.w.rows + r] = p.f32_gemm && jb.in_gemm[t] ? p.f32_gemm(jb.w.cols, reinterpret_cast<const float*>(wr), reinterpret_cast<const float*>(a))
                                  : p.q_gemm && jb.in_gemm[t] ? p.q_gemm(jb.w.cols, wr, a)
                                                               : p.dot(jb.w.cols, wr, a);
      }
    }
  };
  if (!pool || pool->size() == 1) {
    for (int64_t c = 0; c < chunks; ++c) item(c);
    return;
  }
  std::atomic<int64_t> next{0};
  pool->run([&](int) {
    for (int64_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < chunks;) item(c);
  });
}

}  // namespace strata
