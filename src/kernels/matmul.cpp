#include "kernels/matmul.h"

#include "core/error.h"
#include "core/thread_pool.h"

namespace strata {

void matmul(const KernelTable& k, ThreadPool* pool, const QMatrix& w, const float* x, int64_t n, float* y, MatmulScratch& s) {
  const GgmlType vt = quant_traits(w.type).vec_dot_type;
  const auto wi = static_cast<uint32_t>(w.type);
  const uint8_t* act;
  size_t act_row;
  if (w.type == GgmlType::F32) {
    act = reinterpret_cast<const uint8_t*>(x);
    act_row = static_cast<size_t>(w.cols) * sizeof(float);
  } else {
    STRATA_CHECK(k.vec_dot[wi] && k.quantize_act[static_cast<uint32_t>(vt)], "no {} kernel for weight type {}", k.name, ggml_type_name(w.type));
    act_row = ggml_row_size(vt, static_cast<uint64_t>(w.cols));
    uint8_t* buf = s.reserve(act_row * static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) k.quantize_act[static_cast<uint32_t>(vt)](x + j * w.cols, buf + j * act_row, w.cols);
    act = buf;
  }
  auto work = [&](int64_t r0, int64_t r1, int) {
    if (w.type == GgmlType::F32) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* wr = reinterpret_cast<const float*>(w.row(r));
        for (int64_t j = 0; j < n; ++j) y[j * w.rows + r] = k.dot_f32(w.cols, wr, reinterpret_cast<const float*>(act + j * act_row));
      }
      return;
    }
    const VecDotFn dot = k.vec_dot[wi];
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < n; ++j) y[j * w.rows + r] = dot(w.cols, w.row(r), act + j * act_row);
  };
  if (pool) pool->parallel_for(w.rows, 16, work);
  else work(0, w.rows, 0);
}

}  // namespace strata
