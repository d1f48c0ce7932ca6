// NEON float kernels: F32 / F16 / BF16 dots, the f32 / f16 vector ops of the kernel table, the
// activation quantizers (f32 -> Q8_0 / Q8_1 / Q8_K / F16) and the Q8_0 / Q4_0 / F16 / BF16 dequantizers. Each keeps the AVX2 table's
// association (8-lane accumulators as two 4-lane halves, the same horizontal sums, the same
// fused and unfused tails), so results are its bits; quantizers round to nearest even as
// cvtps_epi32 / vcvtph do.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "kernels/kernel_table.h"
#include "kernels/neon/kernels_neon.h"
#include "kernels/neon/neon_common.h"

namespace strata::neon {
namespace {

using namespace strata::neon_common;

inline float32x4_t load_f16x4(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
inline F8 load_f16x8(const uint16_t* p) { return {load_f16x4(p), load_f16x4(p + 4)}; }
inline F8 load_f32x8(const float* p) { return {vld1q_f32(p), vld1q_f32(p + 4)}; }
inline F8 fma8v(F8 acc, F8 a, F8 b) { return {vfmaq_f32(acc.lo, a.lo, b.lo), vfmaq_f32(acc.hi, a.hi, b.hi)}; }
inline float32x4_t bf16x4(uint16x4_t v) { return vreinterpretq_f32_u32(vshll_n_u16(v, 16)); }

// ggml's f32 dot: 4 x 8 fused lanes over steps of 32, (0+2)+(1+3) to one vector, lo + hi, then
// two horizontal adds ((t0+t1)+(t2+t3)), then the tail fused in float.
float dot_f32(int64_t n, const float* x, const float* y) {
  F8 s0 = f8_zero(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = fma8v(s0, load_f32x8(x + i), load_f32x8(y + i));
    s1 = fma8v(s1, load_f32x8(x + i + 8), load_f32x8(y + i + 8));
    s2 = fma8v(s2, load_f32x8(x + i + 16), load_f32x8(y + i + 16));
    s3 = fma8v(s3, load_f32x8(x + i + 24), load_f32x8(y + i + 24));
  }
  const F8 s = add8(add8(s0, s2), add8(s1, s3));
  const float32x4_t t = vaddq_f32(s.lo, s.hi);
  float sum = (vgetq_lane_f32(t, 0) + vgetq_lane_f32(t, 1)) + (vgetq_lane_f32(t, 2) + vgetq_lane_f32(t, 3));
  for (; i < n; ++i) sum = std::fma(x[i], y[i], sum);
  return sum;
}

float dot_f32_x8(int64_t n, const float* x, const float* y) {
  F8 s = f8_zero();
  for (int64_t i = 0; i < n; i += 8) s = fma8v(s, load_f32x8(x + i), load_f32x8(y + i));
  return hsum8(s);
}

float vec_dot_f32_f32(int64_t n, const void* w, const void* a) {
  return dot_f32(n, static_cast<const float*>(w), static_cast<const float*>(a));
}

float vec_dot_f16_f16(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const uint16_t*>(vw);
  const auto* y = static_cast<const uint16_t*>(va);
  F8 s0 = f8_zero(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetch(x + i + kPrefetchAhead / 2);
    s0 = fma8v(s0, load_f16x8(x + i), load_f16x8(y + i));
    s1 = fma8v(s1, load_f16x8(x + i + 8), load_f16x8(y + i + 8));
    s2 = fma8v(s2, load_f16x8(x + i + 16), load_f16x8(y + i + 16));
    s3 = fma8v(s3, load_f16x8(x + i + 24), load_f16x8(y + i + 24));
  }
  for (; i + 8 <= n; i += 8) s0 = fma8v(s0, load_f16x8(x + i), load_f16x8(y + i));
  float s = hsum8(add8(add8(s0, s1), add8(s2, s3)));
  for (; i < n; ++i) s += h2f(x[i]) * h2f(y[i]);
  return s;
}

// The AVX2 kernel widens 16 bf16 values with unpacklo/hi per 128-bit lane: its accumulator s0
// holds values 0..3 and 8..11 of each 16, s1 values 4..7 and 12..15 (s2, s3 the next 16).
float vec_dot_bf16_bf16(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const uint16_t*>(vw);
  const auto* y = static_cast<const uint16_t*>(va);
  F8 s0 = f8_zero(), s1 = s0, s2 = s0, s3 = s0;
  auto pick = [](const uint16_t* p, int a, int b) -> F8 { return {bf16x4(vld1_u16(p + a)), bf16x4(vld1_u16(p + b))}; };
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetch(x + i + kPrefetchAhead / 2);
    s0 = fma8v(s0, pick(x + i, 0, 8), pick(y + i, 0, 8));
    s1 = fma8v(s1, pick(x + i, 4, 12), pick(y + i, 4, 12));
    s2 = fma8v(s2, pick(x + i, 16, 24), pick(y + i, 16, 24));
    s3 = fma8v(s3, pick(x + i, 20, 28), pick(y + i, 20, 28));
  }
  for (; i + 8 <= n; i += 8) s0 = fma8v(s0, pick(x + i, 0, 4), pick(y + i, 0, 4));
  float s = hsum8(add8(add8(s0, s1), add8(s2, s3)));
  for (; i < n; ++i) s += bf16_to_f32(x[i]) * bf16_to_f32(y[i]);
  return s;
}

void axpy_f32(int64_t n, float a, const float* x, float* y) {
  const float32x4_t va = vdupq_n_f32(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    vst1q_f32(y + i, vfmaq_f32(vld1q_f32(y + i), va, vld1q_f32(x + i)));
    vst1q_f32(y + i + 4, vfmaq_f32(vld1q_f32(y + i + 4), va, vld1q_f32(x + i + 4)));
  }
  for (; i < n; ++i) y[i] += a * x[i];
}

void scale_f32(int64_t n, float a, float* y) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_n_f32(vld1q_f32(y + i), a));
  for (; i < n; ++i) y[i] *= a;
}

// 8 fused lanes, then (0+4)+(2+6) + (1+5)+(3+7), the tail fused.
float dot_f16_f32(int64_t n, const uint16_t* x, const float* y) {
  F8 s = f8_zero();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) s = fma8v(s, load_f16x8(x + i), load_f32x8(y + i));
  float r = hsum8(s);
  for (; i < n; ++i) r = std::fma(f16_to_f32(x[i]), y[i], r);
  return r;
}

void axpy_f16(int64_t n, float a, const uint16_t* x, float* y) {
  const float32x4_t va = vdupq_n_f32(a);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_f32(vld1q_f32(y + i), va, load_f16x4(x + i)));
  for (; i < n; ++i) y[i] = std::fma(a, f16_to_f32(x[i]), y[i]);
}

// M queries (M <= 8) against one f16 row, each as dot_f16_f32, the row converted once.
template <int M>
void dot_f16_f32_m(int64_t n, const uint16_t* x, const float* const* y, float* out) {
  F8 s[M];
  for (int q = 0; q < M; ++q) s[q] = f8_zero();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const F8 xv = load_f16x8(x + i);
    for (int q = 0; q < M; ++q) s[q] = fma8v(s[q], xv, load_f32x8(y[q] + i));
  }
  for (int q = 0; q < M; ++q) {
    float r = hsum8(s[q]);
    for (int64_t k = i; k < n; ++k) r = std::fma(f16_to_f32(x[k]), y[q][k], r);
    out[q] = r;
  }
}

void dot_f16_f32_multi(int64_t n, const uint16_t* x, const float* const* y, int m, float* out) {
  using Fn = void (*)(int64_t, const uint16_t*, const float* const*, float*);
  static constexpr Fn kFns[9] = {nullptr, dot_f16_f32_m<1>, dot_f16_f32_m<2>, dot_f16_f32_m<3>, dot_f16_f32_m<4>,
                                 dot_f16_f32_m<5>, dot_f16_f32_m<6>, dot_f16_f32_m<7>, dot_f16_f32_m<8>};
  for (int q = 0; q < m; q += 8) kFns[std::min(8, m - q)](n, x, y + q, out + q);
}

// Up to 4 queries' value sums over one 8-wide column of the value rows (repeated axpy_f16).
template <int M>
void vsum_f16_col(int64_t n_keys, const uint16_t* v, int64_t v_stride, const float* w, int64_t w_stride, float* const* y, int64_t c) {
  F8 acc[M];
  for (int q = 0; q < M; ++q) acc[q] = f8_zero();
  for (int64_t j = 0; j < n_keys; ++j) {
    const F8 xv = load_f16x8(v + j * v_stride + c);
    for (int q = 0; q < M; ++q)
      if (const float a = w[q * w_stride + j]; a != 0.0f) {
        const float32x4_t va = vdupq_n_f32(a);
        acc[q] = {vfmaq_f32(acc[q].lo, va, xv.lo), vfmaq_f32(acc[q].hi, va, xv.hi)};
      }
  }
  for (int q = 0; q < M; ++q) {
    vst1q_f32(y[q] + c, acc[q].lo);
    vst1q_f32(y[q] + c + 4, acc[q].hi);
  }
}

void vsum_f16_multi(int64_t n_keys, int64_t dv, const uint16_t* v, int64_t v_stride, const float* w, int64_t w_stride, float* const* y,
                    int m) {
  using Fn = void (*)(int64_t, const uint16_t*, int64_t, const float*, int64_t, float* const*, int64_t);
  static constexpr Fn kFns[5] = {nullptr, vsum_f16_col<1>, vsum_f16_col<2>, vsum_f16_col<3>, vsum_f16_col<4>};
  const int64_t d8 = dv / 8 * 8;
  for (int q0 = 0; q0 < m; q0 += 4) {
    const int mq = std::min(4, m - q0);
    for (int64_t c = 0; c < d8; c += 8) kFns[mq](n_keys, v, v_stride, w + q0 * w_stride, w_stride, y + q0, c);
  }
  for (int q = 0; q < m; ++q) {  // columns past the last 8: as axpy_f16's tail
    std::fill(y[q] + d8, y[q] + dv, 0.0f);
    for (int64_t j = 0; j < n_keys; ++j)
      if (const float a = w[q * w_stride + j]; a != 0.0f)
        for (int64_t k = d8; k < dv; ++k) y[q][k] = std::fma(a, f16_to_f32(v[j * v_stride + k]), y[q][k]);
  }
}

// ggml's vectorized expf (ggml_v_expf), four lanes at once: the operations of the one-lane
// reference ggml_vexpf (kernels/ops.cpp) in the same order, so every lane gets its bits.
float32x4_t vexpf4(float32x4_t x) {
  const float32x4_t r = vdupq_n_f32(0x1.8p23f);
  const float32x4_t z = vfmaq_f32(r, x, vdupq_n_f32(0x1.715476p+0f));
  const float32x4_t n = vsubq_f32(z, r);
  const float32x4_t b = vfmsq_f32(vfmsq_f32(x, n, vdupq_n_f32(0x1.62e4p-1f)), n, vdupq_n_f32(0x1.7f7d1cp-20f));
  const uint32x4_t e = vshlq_n_u32(vreinterpretq_u32_f32(z), 23);
  const float32x4_t k = vreinterpretq_f32_u32(vaddq_u32(e, vreinterpretq_u32_f32(vdupq_n_f32(1.0f))));
  const uint32x4_t c = vcagtq_f32(n, vdupq_n_f32(126.0f));
  const float32x4_t u = vmulq_f32(b, b);
  const float32x4_t p7 = vfmaq_f32(vdupq_n_f32(0x1.573e2ep-5f), vdupq_n_f32(0x1.0e4020p-7f), b);
  const float32x4_t p3 = vfmaq_f32(vdupq_n_f32(0x1.fffdb6p-2f), vdupq_n_f32(0x1.555e66p-3f), b);
  const float32x4_t j = vfmaq_f32(vmulq_f32(vdupq_n_f32(0x1.ffffecp-1f), b), vfmaq_f32(p3, p7, u), u);
  const float32x4_t normal = vfmaq_f32(k, j, k);
  if (vmaxvq_u32(c) == 0) return normal;
  const uint32x4_t g = vandq_u32(vclezq_f32(n), vdupq_n_u32(0x82000000u));
  const float32x4_t s1 = vreinterpretq_f32_u32(vaddq_u32(g, vdupq_n_u32(0x7f000000u)));
  const float32x4_t s2 = vreinterpretq_f32_u32(vsubq_u32(e, g));
  const uint32x4_t huge = vcagtq_f32(n, vdupq_n_f32(192.0f));
  const float32x4_t over = vbslq_f32(huge, vmulq_f32(s1, s1), vmulq_f32(vfmaq_f32(s2, s2, j), s1));
  return vbslq_f32(c, over, normal);
}

void expf_f32(int64_t n, const float* x, float* y) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vexpf4(vld1q_f32(x + i)));
  if (i == n) return;
  float t[4] = {};  // the tail as one padded group: each lane is computed on its own
  for (int64_t k = i; k < n; ++k) t[k - i] = x[k];
  vst1q_f32(t, vexpf4(vld1q_f32(t)));
  for (int64_t k = i; k < n; ++k) y[k] = t[k - i];
}

// ---- activation quantizers ------------------------------------------------------------------

inline uint16_t f2h(float f) { return vget_lane_u16(vreinterpret_u16_f16(vcvt_f16_f32(vdupq_n_f32(f))), 0); }

// 32 floats -> 32 int8 (x * id rounded to nearest even, saturated); returns the int32 sum of
// the unsaturated codes (as the AVX2 kernel sums them before packing).
inline int32_t quantize32(const float* x, float id, int8_t* q) {
  int32x4_t sum = vdupq_n_s32(0);
  for (int k = 0; k < 2; ++k) {
    int32x4_t v[4];
    for (int j = 0; j < 4; ++j) {
      v[j] = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 16 * k + 4 * j), id));
      sum = vaddq_s32(sum, v[j]);
    }
    const int16x8_t a = vcombine_s16(vqmovn_s32(v[0]), vqmovn_s32(v[1]));
    const int16x8_t b = vcombine_s16(vqmovn_s32(v[2]), vqmovn_s32(v[3]));
    vst1q_s8(q + 16 * k, vcombine_s8(vqmovn_s16(a), vqmovn_s16(b)));
  }
  return vaddvq_s32(sum);
}

inline float absmax(const float* x, int n) {
  float32x4_t m = vdupq_n_f32(0.0f);
  for (int j = 0; j < n; j += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + j)));
  return vmaxvq_f32(m);
}

void quantize_q8_0(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q8_0*>(vy);
  for (int64_t i = 0; i < n / QK8_0; ++i, x += QK8_0) {
    const float amax = absmax(x, QK8_0);
    y[i].d = f2h(amax / 127.0f);
    quantize32(x, amax != 0.0f ? 127.0f / amax : 0.0f, y[i].qs);
  }
}

void quantize_q8_1(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q8_1*>(vy);
  for (int64_t i = 0; i < n / QK8_1; ++i, x += QK8_1) {
    const float amax = absmax(x, QK8_1);
    const float d = amax / 127.0f;
    y[i].d = f2h(d);
    const int32_t sum = quantize32(x, amax != 0.0f ? 127.0f / amax : 0.0f, y[i].qs);
    y[i].s = f2h(d * static_cast<float>(sum));
  }
}

// Q8_K: the scale from the signed value of largest magnitude (the first on ties), codes clamped
// to [-127, 127], per-16 sums.
void quantize_q8_K(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q8_K*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    const float amax = absmax(x, QK_K);
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(block_q8_K));
      continue;
    }
    float max = 0.0f;
    for (int j = 0; j < QK_K; ++j) {
      if (std::fabs(x[j]) == amax) {
        max = x[j];
        break;
      }
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < QK_K; j += 32) quantize32(x + j, iscale, y[i].qs + j);
    for (int j = 0; j < QK_K / 16; ++j) {
      const int8x16_t q = vmaxq_s8(vminq_s8(vld1q_s8(y[i].qs + 16 * j), vdupq_n_s8(127)), vdupq_n_s8(-127));
      vst1q_s8(y[i].qs + 16 * j, q);
      y[i].bsums[j] = static_cast<int16_t>(vaddlvq_s8(q));
    }
    y[i].d = 1.0f / iscale;
  }
}

void quantize_f16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint16_t*>(vy);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
  for (; i < n; ++i) y[i] = f2h(x[i]);
}

// ---- dequantization (bit-exact with ggml: one float multiply per value) ----------------------

void dequantize_q8_0(const void* vx, float* y, int64_t n) {
  const auto* b = static_cast<const block_q8_0*>(vx);
  for (int64_t i = 0; i < n / QK8_0; ++i, y += QK8_0) {
    const float d = h2f(b[i].d);
    for (int k = 0; k < 2; ++k) {
      const int8x16_t q = vld1q_s8(b[i].qs + 16 * k);
      const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
      vst1q_f32(y + 16 * k, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d));
      vst1q_f32(y + 16 * k + 4, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), d));
      vst1q_f32(y + 16 * k + 8, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d));
      vst1q_f32(y + 16 * k + 12, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), d));
    }
  }
}

void dequantize_q4_0(const void* vx, float* y, int64_t n) {
  const auto* b = static_cast<const block_q4_0*>(vx);
  for (int64_t i = 0; i < n / QK4_0; ++i, y += QK4_0) {
    const float d = h2f(b[i].d);
    const uint8x16_t x = vld1q_u8(b[i].qs);
    const int8x16_t eight = vdupq_n_s8(8);
    const int8x16_t q[2] = {vsubq_s8(vreinterpretq_s8_u8(vandq_u8(x, vdupq_n_u8(0x0F))), eight),
                            vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(x, 4)), eight)};
    for (int k = 0; k < 2; ++k) {
      const int16x8_t lo = vmovl_s8(vget_low_s8(q[k])), hi = vmovl_high_s8(q[k]);
      vst1q_f32(y + 16 * k, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d));
      vst1q_f32(y + 16 * k + 4, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), d));
      vst1q_f32(y + 16 * k + 8, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d));
      vst1q_f32(y + 16 * k + 12, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), d));
    }
  }
}

void dequantize_f16(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(vx);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, load_f16x4(x + i));
  for (; i < n; ++i) y[i] = f16_to_f32(x[i]);
}

void dequantize_bf16(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(vx);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, bf16x4(vld1_u16(x + i)));
  for (; i < n; ++i) y[i] = bf16_to_f32(x[i]);
}

}  // namespace

void fill_float(KernelTable& t) {
  auto at = [](GgmlType g) { return static_cast<uint32_t>(g); };
  t.vec_dot[at(GgmlType::F32)] = vec_dot_f32_f32;
  t.vec_dot[at(GgmlType::F16)] = vec_dot_f16_f16;
  t.vec_dot[at(GgmlType::BF16)] = vec_dot_bf16_bf16;
  t.quantize_act[at(GgmlType::Q8_0)] = quantize_q8_0;
  t.quantize_act[at(GgmlType::Q8_1)] = quantize_q8_1;
  t.quantize_act[at(GgmlType::Q8_K)] = quantize_q8_K;
  t.quantize_act[at(GgmlType::F16)] = quantize_f16;
  t.dequantize[at(GgmlType::Q8_0)] = dequantize_q8_0;
  t.dequantize[at(GgmlType::Q4_0)] = dequantize_q4_0;
  t.dequantize[at(GgmlType::F16)] = dequantize_f16;
  t.dequantize[at(GgmlType::BF16)] = dequantize_bf16;
  t.dot_f32 = dot_f32;
  t.dot_f32_x8 = dot_f32_x8;
  t.axpy_f32 = axpy_f32;
  t.scale_f32 = scale_f32;
  t.expf_f32 = expf_f32;
  t.dot_f16_f32 = dot_f16_f32;
  t.axpy_f16 = axpy_f16;
  t.dot_f16_f32_multi = dot_f16_f32_multi;
  t.vsum_f16_multi = vsum_f16_multi;
}

}  // namespace strata::neon
