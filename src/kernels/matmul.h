#pragma once
// Threaded matrix x activations on quantized weights. Activations are quantized once per
// call to the weight type's vec_dot_type; each weight row is then dotted with all n
// activation rows while it is hot in cache, so weights stream from memory once for n tokens.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gguf/ggml_type.h"
#include "kernels/kernel_table.h"

namespace strata {

class ThreadPool;

// Weights [rows, cols], row-major (cols innermost): a GGUF 2-D tensor with ne[0]=cols, ne[1]=rows.
struct QMatrix {
  GgmlType type = GgmlType::F32;
  int64_t rows = 0, cols = 0;
  const void* data = nullptr;
  size_t row_stride_bytes = 0;

  bool empty() const { return data == nullptr; }
  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_stride_bytes; }
};

// Preallocated activation buffer; grows once, never on the hot path once warmed up.
struct MatmulScratch {
  std::vector<uint8_t> act;
  uint8_t* reserve(size_t bytes) {
    if (act.size() < bytes) act.resize(bytes);
    return act.data();
  }
};

// y[n, rows] = x[n, cols] * w^T. pool may be null (single thread).
void matmul(const KernelTable& k, ThreadPool* pool, const QMatrix& w, const float* x, int64_t n, float* y, MatmulScratch& s);

}  // namespace strata
