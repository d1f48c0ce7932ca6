#include <algorithm>
// Scalar kernel table: the reference.
#include <cmath>

#include "core/fp16.h"
#include "kernels/kernel_table.h"
#include "kernels/ops.h"

namespace strata {

void quantize_act_q8_0_scalar(const float* x, void* dst, int64_t n);
void quantize_act_q8_1_scalar(const float* x, void* dst, int64_t n);

// Same association as llama.cpp's CPU f32 dot (4 x 8 fused multiply-add lanes over steps of
// 32, pairwise lane reduction, then the tail fused in float), so results agree to the last bit where it matters
// (near-tied router scores).
static void expf_f32_scalar(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = ggml_vexpf(x[i]);
}

static float dot_f32_scalar(int64_t n, const float* a, const float* b) {
  float acc[4][8] = {};
  const int64_t np = n & ~int64_t{31};
  for (int64_t i = 0; i < np; i += 32)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 8; ++l) acc[j][l] = std::fma(a[i + j * 8 + l], b[i + j * 8 + l], acc[j][l]);
  for (int l = 0; l < 8; ++l) {
    acc[0][l] += acc[2][l];
    acc[1][l] += acc[3][l];
  }
  for (int l = 0; l < 8; ++l) acc[0][l] += acc[1][l];
  // hsum: (lo128 + hi128), then two horizontal adds.
  float t[4];
  for (int l = 0; l < 4; ++l) t[l] = acc[0][l] + acc[0][l + 4];
  const float h0 = t[0] + t[1], h1 = t[2] + t[3];
  float sum = h0 + h1;
  for (int64_t i = np; i < n; ++i) sum = std::fma(a[i], b[i], sum);
  return sum;
}
static float dot_f32_x8_scalar(int64_t n, const float* a, const float* b) {
  float acc[8] = {};
  for (int64_t i = 0; i < n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(a[i + l], b[i + l], acc[l]);
  const float t0 = acc[0] + acc[4], t1 = acc[1] + acc[5], t2 = acc[2] + acc[6], t3 = acc[3] + acc[7];
  return (t0 + t2) + (t1 + t3);
}
static void axpy_f32_scalar(int64_t n, float a, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
static float dot_f16_f32_scalar(int64_t n, const uint16_t* a, const float* b) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(f16_to_f32(a[i + l]), b[i + l], acc[l]);
  float s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s = std::fma(f16_to_f32(a[i]), b[i], s);
  return s;
}
static void axpy_f16_scalar(int64_t n, float a, const uint16_t* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::fma(a, f16_to_f32(x[i]), y[i]);
}
static void dot_f16_f32_multi_scalar(int64_t n, const uint16_t* a, const float* const* b, int m, float* out) {
  for (int q = 0; q < m; ++q) out[q] = dot_f16_f32_scalar(n, a, b[q]);
}
static void vsum_f16_multi_scalar(int64_t n_keys, int64_t dv, const uint16_t* v, int64_t v_stride, const float* w, int64_t w_stride,
                                  float* const* y, int m) {
  for (int q = 0; q < m; ++q) {
    std::fill(y[q], y[q] + dv, 0.0f);
    for (int64_t j = 0; j < n_keys; ++j)
      if (const float a = w[q * w_stride + j]; a != 0.0f) axpy_f16_scalar(dv, a, v + j * v_stride, y[q]);
  }
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
  // Activations as llama.cpp's CPU path quantizes them.
  t.quantize_act[static_cast<uint32_t>(GgmlType::Q8_0)] = quantize_act_q8_0_scalar;
  t.quantize_act[static_cast<uint32_t>(GgmlType::Q8_1)] = quantize_act_q8_1_scalar;
  t.dot_f32 = dot_f32_scalar;
  t.dot_f32_x8 = dot_f32_x8_scalar;
  t.axpy_f32 = axpy_f32_scalar;
  t.scale_f32 = scale_f32_scalar;
  t.expf_f32 = expf_f32_scalar;
  t.dot_f16_f32 = dot_f16_f32_scalar;
  t.axpy_f16 = axpy_f16_scalar;
  t.dot_f16_f32_multi = dot_f16_f32_multi_scalar;
  t.vsum_f16_multi = vsum_f16_multi_scalar;
}

}  // namespace strata
