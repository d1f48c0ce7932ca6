// Scalar kernel table: the reference.
#include "kernels/kernel_table.h"

namespace strata {

static float dot_f32_scalar(int64_t n, const float* a, const float* b) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
static void axpy_f32_scalar(int64_t n, float a, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
static void scale_f32_scalar(int64_t n, float a, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}

void fill_scalar_table(KernelTable& t) {
  t.isa = Isa::Scalar;
  t.name = "scalar";
  for (uint32_t i = 0; i < kGgmlTypeCount; ++i) {
    if (!ggml_type_info(i)) continue;
    const QuantTraits& q = quant_traits(static_cast<GgmlType>(i));
    t.vec_dot[i] = q.vec_dot;
    t.dequantize[i] = q.to_float;
    t.quantize_act[i] = q.from_float;
  }
  t.dot_f32 = dot_f32_scalar;
  t.axpy_f32 = axpy_f32_scalar;
  t.scale_f32 = scale_f32_scalar;
}

}  // namespace strata
