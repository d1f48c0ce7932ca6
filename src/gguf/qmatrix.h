#pragma once
// A view of one 2-D weight matrix in any ggml type: what the kernels compute on and what the
// expert tier hands out (bytes of a mapped file or of a cache slot). No ownership.
#include <cstddef>
#include <cstdint>

#include "gguf/ggml_type.h"

namespace strata {

// A 2-D weight tensor: GGUF ne[0] = cols (innermost), ne[1] = rows.
struct QMatrix {
  GgmlType type = GgmlType::F32;
  int64_t rows = 0, cols = 0;
  const void* data = nullptr;   // [rows, row_stride_bytes]
  size_t row_stride_bytes = 0;  // >= ggml_row_size(type, cols)

  bool empty() const { return data == nullptr; }
  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_stride_bytes; }
};

}  // namespace strata
