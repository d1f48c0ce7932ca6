// Legacy 32-value blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (weights) and Q8_1 (activations).
// Layout: value j of a block is the low nibble of qs[j] for j < 16 and the high nibble of
// qs[j-16] otherwise; Q5_* keep bit 4 of value j in bit j of the little-endian qh word.
// Dequantization: q*d (symmetric, q centred on 8 or 16) or q*d + m (Q4_1/Q5_1).
// Weight quantizers reproduce ggml's reference quantizers byte-for-byte (same float ops).
#include <algorithm>

#include "kernels/scalar/quants_internal.h"

namespace strata::scalar {
namespace {

constexpr int kQ = 32;  // values per block for the whole family

// ---- unpacking to small integers: the one place that knows each bit layout ----

void unpack_q4_0(const block_q4_0& b, int8_t q[kQ]) {  // q in [-8, 7]
  for (int j = 0; j < kQ / 2; ++j) {
    q[j] = static_cast<int8_t>((b.qs[j] & 0x0F) - 8);
    q[j + kQ / 2] = static_cast<int8_t>((b.qs[j] >> 4) - 8);
  }
}
void unpack_q4_1(const block_q4_1& b, int8_t q[kQ]) {  // q in [0, 15]
  for (int j = 0; j < kQ / 2; ++j) {
    q[j] = static_cast<int8_t>(b.qs[j] & 0x0F);
    q[j + kQ / 2] = static_cast<int8_t>(b.qs[j] >> 4);
  }
}
uint32_t load_qh(const uint8_t qh[4]) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return h;
}
// 5-bit values (unsigned, [0, 31]) from nibbles + high bits.
void unpack_q5(const uint8_t qs[kQ / 2], const uint8_t qh_bytes[4], int offset, int8_t q[kQ]) {
  const uint32_t qh = load_qh(qh_bytes);
  for (int j = 0; j < kQ / 2; ++j) {
    const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
    const int h1 = static_cast<int>((qh >> (j + kQ / 2)) & 1u) << 4;
    q[j] = static_cast<int8_t>(((qs[j] & 0x0F) | h0) - offset);
    q[j + kQ / 2] = static_cast<int8_t>(((qs[j] >> 4) | h1) - offset);
  }
}
void pack_nibbles(const uint8_t l[kQ], uint8_t qs[kQ / 2]) {
  for (int j = 0; j < kQ / 2; ++j) qs[j] = static_cast<uint8_t>((l[j] & 0x0F) | ((l[j + kQ / 2] & 0x0F) << 4));
}
void pack_high_bits(const uint8_t l[kQ], uint8_t qh_bytes[4]) {
  uint32_t qh = 0;
  for (int j = 0; j < kQ; ++j) qh |= static_cast<uint32_t>((l[j] >> 4) & 1u) << j;
  std::memcpy(qh_bytes, &qh, 4);
}
int dot_i8(const int8_t* a, const int8_t* b, int n) {
  int s = 0;
  for (int j = 0; j < n; ++j) s += a[j] * b[j];
  return s;
}

// Value with the largest magnitude (first one on ties), keeping its sign.
float signed_absmax(const float* x, int n) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}
void min_max(const float* x, int n, float& mn, float& mx) {
  mn = x[0];
  mx = x[0];
  for (int j = 1; j < n; ++j) {
    mn = std::min(mn, x[j]);
    mx = std::max(mx, x[j]);
  }
}

// ---- Q4_0: q*d, q in [-8, 7], d = signed absmax / -8 ----

void to_float_q4_0(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const block_q4_0*>(src);
  int8_t q[kQ];
  for (int64_t i = 0; i < n / kQ; ++i, y += kQ) {
    const float d = f16(b[i].d);
    unpack_q4_0(b[i], q);
    for (int j = 0; j < kQ; ++j) y[j] = static_cast<float>(q[j]) * d;
  }
}
void from_float_q4_0(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<block_q4_0*>(dst);
  uint8_t l[kQ];
  for (int64_t i = 0; i < n / kQ; ++i, x += kQ) {
    const float d = signed_absmax(x, kQ) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    for (int j = 0; j < kQ; ++j) l[j] = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f))));
    pack_nibbles(l, b[i].qs);
  }
}
float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_q4_0*>(w);
  const auto* y = static_cast<const block_q8_0*>(a);
  int8_t q[kQ];
  double s = 0;
  for (int64_t i = 0; i < n / kQ; ++i) {
    unpack_q4_0(x[i], q);
    s += block_dot(f16(x[i].d), f16(y[i].d), dot_i8(q, y[i].qs, kQ));
  }
  return static_cast<float>(s);
}

// ---- Q4_1: q*d + m, q in [0, 15], d = (max - min) / 15, m = min ----

void to_float_q4_1(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const block_q4_1*>(src);
  int8_t q[kQ];
  for (int64_t i = 0; i < n / kQ; ++i, y += kQ) {
    const float d = f16(b[i].d), m = f16(b[i].m);
    unpack_q4_1(b[i], q);
    for (int j = 0; j < kQ; ++j) y[j] = static_cast<float>(q[j]) * d + m;
  }
}
void from_float_q4_1(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<block_q4_1*>(dst);
  uint8_t l[kQ];
  for (int64_t i = 0; i < n / kQ; ++i, x += kQ) {
    float mn, mx;
    min_max(x, kQ, mn, mx);
    const float d = (mx - mn) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    b[i].m = f32_to_f16(mn);
    for (int j = 0; j < kQ; ++j) l[j] = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - mn) * id + 0.5f))));
    pack_nibbles(l, b[i].qs);
  }
}
// sum(w*a) = d_w*d_a*sum(q_w*q_a) + m_w*s_a, with s_a = d_a*sum(q_a) stored in the Q8_1 block.
float vec_dot_q4_1_q8_1(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_q4_1*>(w);
  const auto* y = static_cast<const block_q8_1*>(a);
  int8_t q[kQ];
  double s = 0;
  for (int64_t i = 0; i < n / kQ; ++i) {
    unpack_q4_1(x[i], q);
    s += block_dot(f16(x[i].d), f16(y[i].d), dot_i8(q, y[i].qs, kQ)) + static_cast<double>(f16(x[i].m)) * f16(y[i].s);
  }
  return static_cast<float>(s);
}

// ---- Q5_0: q*d, q in [-16, 15], d = signed absmax / -16 ----

void to_float_q5_0(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const block_q5_0*>(src);
  int8_t q[kQ];
  for (int64_t i = 0; i < n / kQ; ++i, y += kQ) {
    const float d = f16(b[i].d);
    unpack_q5(b[i].qs, b[i].qh, 16, q);
    for (int j = 0; j < kQ; ++j) y[j] = static_cast<float>(q[j]) * d;
  }
}
void from_float_q5_0(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<block_q5_0*>(dst);
  uint8_t l[kQ];
  for (int64_t i = 0; i < n / kQ; ++i, x += kQ) {
    const float d = signed_absmax(x, kQ) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    for (int j = 0; j < kQ; ++j) l[j] = static_cast<uint8_t>(std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f))));
    pack_nibbles(l, b[i].qs);
    pack_high_bits(l, b[i].qh);
  }
}
float vec_dot_q5_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_q5_0*>(w);
  const auto* y = static_cast<const block_q8_0*>(a);
  int8_t q[kQ];
  double s = 0;
  for (int64_t i = 0; i < n / kQ; ++i) {
    unpack_q5(x[i].qs, x[i].qh, 16, q);
    s += block_dot(f16(x[i].d), f16(y[i].d), dot_i8(q, y[i].qs, kQ));
  }
  return static_cast<float>(s);
}

// ---- Q5_1: q*d + m, q in [0, 31], d = (max - min) / 31, m = min ----

void to_float_q5_1(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const block_q5_1*>(src);
  int8_t q[kQ];
  for (int64_t i = 0; i < n / kQ; ++i, y += kQ) {
    const float d = f16(b[i].d), m = f16(b[i].m);
    unpack_q5(b[i].qs, b[i].qh, 0, q);
    for (int j = 0; j < kQ; ++j) y[j] = static_cast<float>(q[j]) * d + m;
  }
}
void from_float_q5_1(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<block_q5_1*>(dst);
  uint8_t l[kQ];
  for (int64_t i = 0; i < n / kQ; ++i, x += kQ) {
    float mn, mx;
    min_max(x, kQ, mn, mx);
    const float d = (mx - mn) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    b[i].m = f32_to_f16(mn);
    for (int j = 0; j < kQ; ++j) l[j] = static_cast<uint8_t>((x[j] - mn) * id + 0.5f);
    pack_nibbles(l, b[i].qs);
    pack_high_bits(l, b[i].qh);
  }
}
float vec_dot_q5_1_q8_1(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_q5_1*>(w);
  const auto* y = static_cast<const block_q8_1*>(a);
  int8_t q[kQ];
  double s = 0;
  for (int64_t i = 0; i < n / kQ; ++i) {
    unpack_q5(x[i].qs, x[i].qh, 0, q);
    s += block_dot(f16(x[i].d), f16(y[i].d), dot_i8(q, y[i].qs, kQ)) + static_cast<double>(f16(x[i].m)) * f16(y[i].s);
  }
  return static_cast<float>(s);
}

// ---- Q8_0 / Q8_1: q*d, q in [-127, 127], d = absmax / 127 ----
// ggml's reference quantizer: inputs times 1/d, rounded half away from zero. (ggml's AVX2
// activation quantizer multiplies by 127/absmax and rounds half to even instead; the two agree
// on the golden activations, and only the reference one reproduces ggml_quantize_chunk's Q8_0
// weights, e.g. on f16-subnormal inputs.)

struct Q8Scale {
  float d;   // stored scale
  float id;  // multiplier applied to the inputs
};
Q8Scale q8_scale(const float* x) {
  float amax = 0;
  for (int j = 0; j < kQ; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  return {d, d != 0.0f ? 1.0f / d : 0.0f};
}

void to_float_q8_0(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const block_q8_0*>(src);
  for (int64_t i = 0; i < n / kQ; ++i, y += kQ) {
    const float d = f16(b[i].d);
    for (int j = 0; j < kQ; ++j) y[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}
void from_float_q8_0(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<block_q8_0*>(dst);
  for (int64_t i = 0; i < n / kQ; ++i, x += kQ) {
    const Q8Scale s = q8_scale(x);
    b[i].d = f32_to_f16(s.d);
    for (int j = 0; j < kQ; ++j) b[i].qs[j] = static_cast<int8_t>(std::round(x[j] * s.id));
  }
}
float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_q8_0*>(w);
  const auto* y = static_cast<const block_q8_0*>(a);
  double s = 0;
  for (int64_t i = 0; i < n / kQ; ++i) s += block_dot(f16(x[i].d), f16(y[i].d), dot_i8(x[i].qs, y[i].qs, kQ));
  return static_cast<float>(s);
}

void to_float_q8_1(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const block_q8_1*>(src);
  for (int64_t i = 0; i < n / kQ; ++i, y += kQ) {
    const float d = f16(b[i].d);
    for (int j = 0; j < kQ; ++j) y[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}
void from_float_q8_1(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<block_q8_1*>(dst);
  for (int64_t i = 0; i < n / kQ; ++i, x += kQ) {
    const Q8Scale s = q8_scale(x);
    int sum = 0;
    for (int j = 0; j < kQ; ++j) {
      b[i].qs[j] = static_cast<int8_t>(std::round(x[j] * s.id));
      sum += b[i].qs[j];
    }
    b[i].d = f32_to_f16(s.d);
    b[i].s = f32_to_f16(s.d * static_cast<float>(sum));
  }
}

}  // namespace

void register_legacy_quants(QuantTable& t) {
  set_traits(t, GgmlType::Q4_0, to_float_q4_0, from_float_q4_0, GgmlType::Q8_0, vec_dot_q4_0_q8_0);
  set_traits(t, GgmlType::Q4_1, to_float_q4_1, from_float_q4_1, GgmlType::Q8_1, vec_dot_q4_1_q8_1);
  set_traits(t, GgmlType::Q5_0, to_float_q5_0, from_float_q5_0, GgmlType::Q8_0, vec_dot_q5_0_q8_0);
  set_traits(t, GgmlType::Q5_1, to_float_q5_1, from_float_q5_1, GgmlType::Q8_1, vec_dot_q5_1_q8_1);
  set_traits(t, GgmlType::Q8_0, to_float_q8_0, from_float_q8_0, GgmlType::Q8_0, vec_dot_q8_0_q8_0);
  // Q8_1 is an activation format only: no weight dot product.
  set_traits(t, GgmlType::Q8_1, to_float_q8_1, from_float_q8_1, GgmlType::Q8_1, nullptr);
}

}  // namespace strata::scalar
