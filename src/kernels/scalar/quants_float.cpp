// F32, F16 and BF16 rows: conversions and the reference dot product. Each type is its own
// vec_dot_type; products of f16/bf16 values are exact in double, so the dot accumulates in
// double (as ggml's scalar path does) and rounds once.
#include "kernels/scalar/quants_internal.h"

namespace strata::scalar {
namespace {

void to_float_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void from_float_f32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
float vec_dot_f32(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const float*>(w);  // [n]
  const auto* y = static_cast<const float*>(a);  // [n]
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(y[i]);
  return static_cast<float>(s);
}

void to_float_f16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
}
void from_float_f16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
}
float vec_dot_f16(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(f16_to_f32(x[i])) * static_cast<double>(f16_to_f32(y[i]));
  return static_cast<float>(s);
}

void to_float_bf16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
}
void from_float_bf16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
}
float vec_dot_bf16(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(bf16_to_f32(x[i])) * static_cast<double>(bf16_to_f32(y[i]));
  return static_cast<float>(s);
}

}  // namespace

void register_float_quants(QuantTable& t) {
  set_traits(t, GgmlType::F32, to_float_f32, from_float_f32, GgmlType::F32, vec_dot_f32);
  set_traits(t, GgmlType::F16, to_float_f16, from_float_f16, GgmlType::F16, vec_dot_f16);
  set_traits(t, GgmlType::BF16, to_float_bf16, from_float_bf16, GgmlType::BF16, vec_dot_bf16);
}

}  // namespace strata::scalar
