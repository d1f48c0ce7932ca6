// K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K: 256-value super-blocks of 16 or 32-value
// sub-blocks with integer scales) and their activation format Q8_K.
// Bit layouts: unpack_* / pack_* below; quantizers: quants_k_quantize.cpp.
#include <algorithm>

#include "kernels/scalar/quants_k_layout.h"

namespace strata::scalar {

// ---- bit layouts ----
// Q2_K/Q3_K qs: value v sits in byte 32*(v/128) + v%32 at bit 2*((v/32)%4).
// Q3_K hmask: the high bit of value v is bit v/32 of hmask[v%32] (set: q3 >= 0).
// Q4_K/Q5_K qs: value v sits in byte 32*(v/64) + v%32, low nibble if (v/32) even.
// Q5_K qh: bit 4 of value v is bit v/32 of qh[v%32].
// Q6_K: value v = 128*c + 32*k + l: low nibble in ql[64*c + 32*(k&1) + l] at bit 4*(k>>1),
//       high 2 bits in qh[32*c + l] at bit 2*k.

namespace {
int q2_byte(int v) { return 32 * (v / 128) + v % 32; }
int q2_shift(int v) { return 2 * ((v / 32) % 4); }
int q4_byte(int v) { return 32 * (v / 64) + v % 32; }
int q4_shift(int v) { return 4 * ((v / 32) % 2); }
int q6_lbyte(int v) { return 64 * (v / 128) + 32 * ((v / 32) & 1) + v % 32; }
int q6_lshift(int v) { return 4 * (((v / 32) % 4) >> 1); }
int q6_hbyte(int v) { return 32 * (v / 128) + v % 32; }
int q6_hshift(int v) { return 2 * ((v / 32) % 4); }

// Q4_K/Q5_K: eight 6-bit scales and mins in 12 bytes.
void unpack_scales_k4(const uint8_t s[K_SCALE_SIZE], int sc[8], int mn[8]) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      sc[j] = s[j] & 63;
      mn[j] = s[j + 4] & 63;
    } else {
      sc[j] = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
      mn[j] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
  }
}
void pack_scales_k4(const int sc[8], const int mn[8], uint8_t s[K_SCALE_SIZE]) {
  std::memset(s, 0, K_SCALE_SIZE);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      s[j] |= static_cast<uint8_t>(sc[j] & 63);
      s[j + 4] |= static_cast<uint8_t>(mn[j] & 63);
    } else {
      s[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
      s[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      s[j] |= static_cast<uint8_t>((mn[j] >> 4) << 6);
    }
  }
}
}  // namespace

void unpack_q2_K(const block_q2_K& b, KUnpacked& u) {
  for (int v = 0; v < QK_K; ++v) u.q[v] = static_cast<int8_t>((b.qs[q2_byte(v)] >> q2_shift(v)) & 3);
  for (int s = 0; s < 16; ++s) {
    u.sc[s] = b.scales[s] & 0xF;
    u.mn[s] = b.scales[s] >> 4;
  }
  u.d = b.d;
  u.dmin = b.dmin;
}
void pack_q2_K(const KUnpacked& u, block_q2_K& b) {
  std::memset(b.qs, 0, sizeof(b.qs));
  for (int v = 0; v < QK_K; ++v) b.qs[q2_byte(v)] |= static_cast<uint8_t>((u.q[v] & 3) << q2_shift(v));
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<uint8_t>((u.sc[s] & 0xF) | ((u.mn[s] & 0xF) << 4));
  b.d = u.d;
  b.dmin = u.dmin;
}

void unpack_q3_K(const block_q3_K& b, KUnpacked& u) {
  for (int v = 0; v < QK_K; ++v) {
    const int lo = (b.qs[q2_byte(v)] >> q2_shift(v)) & 3;
    const bool hi = (b.hmask[v % 32] >> (v / 32)) & 1;
    u.q[v] = static_cast<int8_t>(lo - (hi ? 0 : 4));
  }
  for (int s = 0; s < 16; ++s) {
    const int lo = s < 8 ? (b.scales[s] & 0xF) : (b.scales[s - 8] >> 4);
    const int hi = (b.scales[8 + s % 4] >> (2 * (s / 4))) & 3;
    u.sc[s] = (lo | (hi << 4)) - 32;
    u.mn[s] = 0;
  }
  u.d = b.d;
  u.dmin = 0;
}
void pack_q3_K(const KUnpacked& u, block_q3_K& b) {
  std::memset(b.qs, 0, sizeof(b.qs));
  std::memset(b.hmask, 0, sizeof(b.hmask));
  std::memset(b.scales, 0, sizeof(b.scales));
  for (int v = 0; v < QK_K; ++v) {
    const int l = u.q[v] + 4;  // [0, 7]
    b.qs[q2_byte(v)] |= static_cast<uint8_t>((l & 3) << q2_shift(v));
    if (l & 4) b.hmask[v % 32] |= static_cast<uint8_t>(1u << (v / 32));
  }
  for (int s = 0; s < 16; ++s) {
    const int l = u.sc[s] + 32;  // [0, 63]
    b.scales[s % 8] |= static_cast<uint8_t>((l & 0xF) << (s < 8 ? 0 : 4));
    b.scales[8 + s % 4] |= static_cast<uint8_t>((l >> 4) << (2 * (s / 4)));
  }
  b.d = u.d;
}

void unpack_q4_K(const block_q4_K& b, KUnpacked& u) {
  for (int v = 0; v < QK_K; ++v) u.q[v] = static_cast<int8_t>((b.qs[q4_byte(v)] >> q4_shift(v)) & 0xF);
  unpack_scales_k4(b.scales, u.sc, u.mn);
  u.d = b.d;
  u.dmin = b.dmin;
}
void pack_q4_K(const KUnpacked& u, block_q4_K& b) {
  std::memset(b.qs, 0, sizeof(b.qs));
  for (int v = 0; v < QK_K; ++v) b.qs[q4_byte(v)] |= static_cast<uint8_t>((u.q[v] & 0xF) << q4_shift(v));
  pack_scales_k4(u.sc, u.mn, b.scales);
  b.d = u.d;
  b.dmin = u.dmin;
}

void unpack_q5_K(const block_q5_K& b, KUnpacked& u) {
  for (int v = 0; v < QK_K; ++v) {
    const int lo = (b.qs[q4_byte(v)] >> q4_shift(v)) & 0xF;
    const int hi = (b.qh[v % 32] >> (v / 32)) & 1;
    u.q[v] = static_cast<int8_t>(lo | (hi << 4));
  }
  unpack_scales_k4(b.scales, u.sc, u.mn);
  u.d = b.d;
  u.dmin = b.dmin;
}
void pack_q5_K(const KUnpacked& u, block_q5_K& b) {
  std::memset(b.qs, 0, sizeof(b.qs));
  std::memset(b.qh, 0, sizeof(b.qh));
  for (int v = 0; v < QK_K; ++v) {
    b.qs[q4_byte(v)] |= static_cast<uint8_t>((u.q[v] & 0xF) << q4_shift(v));
    if (u.q[v] & 0x10) b.qh[v % 32] |= static_cast<uint8_t>(1u << (v / 32));
  }
  pack_scales_k4(u.sc, u.mn, b.scales);
  b.d = u.d;
  b.dmin = u.dmin;
}

void unpack_q6_K(const block_q6_K& b, KUnpacked& u) {
  for (int v = 0; v < QK_K; ++v) {
    const int lo = (b.ql[q6_lbyte(v)] >> q6_lshift(v)) & 0xF;
    const int hi = (b.qh[q6_hbyte(v)] >> q6_hshift(v)) & 3;
    u.q[v] = static_cast<int8_t>((lo | (hi << 4)) - 32);
  }
  for (int s = 0; s < 16; ++s) {
    u.sc[s] = b.scales[s];
    u.mn[s] = 0;
  }
  u.d = b.d;
  u.dmin = 0;
}
void pack_q6_K(const KUnpacked& u, block_q6_K& b) {
  std::memset(b.ql, 0, sizeof(b.ql));
  std::memset(b.qh, 0, sizeof(b.qh));
  for (int v = 0; v < QK_K; ++v) {
    const int l = u.q[v] + 32;  // [0, 63]
    b.ql[q6_lbyte(v)] |= static_cast<uint8_t>((l & 0xF) << q6_lshift(v));
    b.qh[q6_hbyte(v)] |= static_cast<uint8_t>((l >> 4) << q6_hshift(v));
  }
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(u.sc[s]);
  b.d = u.d;
}

namespace {

// ---- generic paths over KUnpacked ----

// y = (d*sc)*q - dmin*mn: the float operations of ggml's dequantizers, in their order.
void dequantize_k(const KFormat& f, const KUnpacked& u, float* y) {
  const float d = f16(u.d), dmin = f16(u.dmin);
  for (int s = 0; s < QK_K / f.sub_size; ++s) {
    const float ds = d * static_cast<float>(u.sc[s]);
    const float ms = dmin * static_cast<float>(u.mn[s]);
    for (int j = s * f.sub_size; j < (s + 1) * f.sub_size; ++j) y[j] = ds * static_cast<float>(u.q[j]) - ms;
  }
}

// sum(w*a) = d_w*d_a * sum_s sc[s]*sum(q*q8) - dmin_w*d_a * sum_s mn[s]*sum(q8 over s);
// the second sum uses the Q8_K bsums (sums over 16 values).
double dot_k(const KFormat& f, const KUnpacked& u, const block_q8_K& a) {
  int32_t isum = 0, imin = 0;
  for (int s = 0; s < QK_K / f.sub_size; ++s) {
    int32_t qs = 0;
    for (int j = s * f.sub_size; j < (s + 1) * f.sub_size; ++j) qs += u.q[j] * a.qs[j];
    isum += u.sc[s] * qs;
    if (f.mn_max) {
      int32_t bs = 0;
      for (int k = s * f.sub_size / 16; k < (s + 1) * f.sub_size / 16; ++k) bs += a.bsums[k];
      imin += u.mn[s] * bs;
    }
  }
  return block_dot(f16(u.d), a.d, isum) - block_dot(f16(u.dmin), a.d, imin);
}

template <typename Block, void (*Unpack)(const Block&, KUnpacked&), const KFormat& F>
void to_float_k(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const Block*>(src);
  KUnpacked u;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    Unpack(b[i], u);
    dequantize_k(F, u, y + i * QK_K);
  }
}
template <typename Block, void (*Pack)(const KUnpacked&, Block&), const KFormat& F>
void from_float_k(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<Block*>(dst);
  KUnpacked u;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    quantize_k_superblock(F, x + i * QK_K, u);
    Pack(u, b[i]);
  }
}
template <typename Block, void (*Unpack)(const Block&, KUnpacked&), const KFormat& F>
float vec_dot_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  KUnpacked u;
  double s = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    Unpack(x[i], u);
    s += dot_k(F, u, y[i]);
  }
  return static_cast<float>(s);
}

// ---- Q8_K: f32 scale, q in [-128, 127], bsums = sums of 16 consecutive q ----

void to_float_q8_K(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const block_q8_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K)
    for (int j = 0; j < QK_K; ++j) y[j] = b[i].d * static_cast<float>(b[i].qs[j]);
}

}  // namespace

// The value of largest magnitude maps to -127 (or +127 when it is negative); d = 1/iscale.
void quantize_row_q8_K(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<block_q8_K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float amax = 0, max = 0;
    for (int j = 0; j < QK_K; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&b[i], 0, sizeof(block_q8_K));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < QK_K; ++j) b[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int k = 0; k < QK_K / 16; ++k) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += b[i].qs[16 * k + j];
      b[i].bsums[k] = static_cast<int16_t>(sum);
    }
    b[i].d = 1 / iscale;
  }
}

void register_k_quants(QuantTable& t) {
  set_traits(t, GgmlType::Q2_K, to_float_k<block_q2_K, unpack_q2_K, kQ2K>, from_float_k<block_q2_K, pack_q2_K, kQ2K>,
             GgmlType::Q8_K, vec_dot_k<block_q2_K, unpack_q2_K, kQ2K>);
  set_traits(t, GgmlType::Q3_K, to_float_k<block_q3_K, unpack_q3_K, kQ3K>, from_float_k<block_q3_K, pack_q3_K, kQ3K>,
             GgmlType::Q8_K, vec_dot_k<block_q3_K, unpack_q3_K, kQ3K>);
  set_traits(t, GgmlType::Q4_K, to_float_k<block_q4_K, unpack_q4_K, kQ4K>, from_float_k<block_q4_K, pack_q4_K, kQ4K>,
             GgmlType::Q8_K, vec_dot_k<block_q4_K, unpack_q4_K, kQ4K>);
  set_traits(t, GgmlType::Q5_K, to_float_k<block_q5_K, unpack_q5_K, kQ5K>, from_float_k<block_q5_K, pack_q5_K, kQ5K>,
             GgmlType::Q8_K, vec_dot_k<block_q5_K, unpack_q5_K, kQ5K>);
  set_traits(t, GgmlType::Q6_K, to_float_k<block_q6_K, unpack_q6_K, kQ6K>, from_float_k<block_q6_K, pack_q6_K, kQ6K>,
             GgmlType::Q8_K, vec_dot_k<block_q6_K, unpack_q6_K, kQ6K>);
  // Q8_K is an activation format only: no weight dot product.
  set_traits(t, GgmlType::Q8_K, to_float_q8_K, quantize_row_q8_K, GgmlType::Q8_K, nullptr);
}

}  // namespace strata::scalar
