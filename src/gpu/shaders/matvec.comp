#version 450
// y[t, row0 + r] = sum_c W[r, c] * x[t, c] for the rows of one part of a weight matrix (a part
// is at most the device's storage range; gpu/ops.cpp dispatches one per part). One workgroup
// per (row, token); threads stride over 32-value units of the row (or single values, for the
// float types), then a tree reduction in shared memory. Weight type: one -D per compiled
// variant (WT_F32, WT_F16, WT_BF16, WT_Q4_0, WT_Q4_1, WT_Q5_0, WT_Q5_1, WT_Q8_0, WT_Q4_K, WT_Q5_K, WT_Q6_K, WT_IQ4_NL,
// WT_IQ4_XS, WT_MXFP4). Arithmetic is f32 on dequantized weights and f32 activations.
#extension GL_GOOGLE_include_directive : require

layout(constant_id = 0) const uint WG = 64;  // threads per workgroup, a power of two
layout(constant_id = 1) const uint NT = 1;   // tokens per workgroup (1..kMaxNt): a prompt's rows share each weight read
layout(local_size_x_id = 0) in;
const uint kMaxNt = 8u;

layout(std430, binding = 0) readonly buffer Wt { uint w[]; };
layout(std430, binding = 1) readonly buffer Xt { float x[]; };
layout(std430, binding = 2) writeonly buffer Yt { float y[]; };
layout(push_constant) uniform Push {
  uint cols;       // values per row
  uint rows;       // rows in this part
  uint row_bytes;  // bytes per row
  uint x_stride;   // floats between tokens in x
  uint y_off;      // float index of (token 0, this part's first row) in y
  uint y_stride;   // floats between tokens in y
  uint n_tok;      // tokens in x
} pc;

shared float partial[WG * kMaxNt];

#include "common.glsl"

const int kIq4nl[16] = int[16](-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
const int kE2m1x2[16] = int[16](0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);

#if defined(WT_Q4_0) || defined(WT_IQ4_NL) || defined(WT_MXFP4)
// 32 values as 16 bytes at `q`: value j (j < 16) is the low nibble of byte j, value j + 16 the high one.
float nibbles_dot(uint q, uint xo) {
  float s = 0.0;
  for (uint k = 0u; k < 4u; ++k) {
    const uint v = rd32(q + 4u * k);
    for (uint j = 0u; j < 4u; ++j) {
      const uint b = (v >> (8u * j)) & 0xFFu;
#if defined(WT_Q4_0)
      const float lo = float(int(b & 15u) - 8), hi = float(int(b >> 4) - 8);
#elif defined(WT_IQ4_NL)
      const float lo = float(kIq4nl[b & 15u]), hi = float(kIq4nl[b >> 4]);
#else
      const float lo = float(kE2m1x2[b & 15u]), hi = float(kE2m1x2[b >> 4]);
#endif
      s += lo * x[xo + 4u * k + j] + hi * x[xo + 16u + 4u * k + j];
    }
  }
  return s;
}
#endif

#if defined(WT_Q4_1) || defined(WT_Q5_0) || defined(WT_Q5_1)
// sum_j q_j x[xo + j] over the 32 quants of a block at `qs` (value j < 16 the low nibble of byte
// j, value j + 16 the high one; Q5: bit j of qh is value j's fifth bit), and sum_j x[xo + j] in sx.
float quant_dot(uint qs, uint qh, uint xo, out float sx) {
  float s = 0.0;
  sx = 0.0;
  for (uint k = 0u; k < 4u; ++k) {
    const uint v = rd32(qs + 4u * k);
    for (uint j = 0u; j < 4u; ++j) {
      const uint i = 4u * k + j, b = (v >> (8u * j)) & 0xFFu;
      uint lo = b & 15u, hi = b >> 4;
#if !defined(WT_Q4_1)
      lo |= ((qh >> i) & 1u) << 4;
      hi |= ((qh >> (i + 16u)) & 1u) << 4;
#endif
      s += float(lo) * x[xo + i] + float(hi) * x[xo + 16u + i];
      sx += x[xo + i] + x[xo + 16u + i];
    }
  }
  return s;
}
#endif

#if defined(WT_Q4_K) || defined(WT_Q5_K)
// 6-bit scale and min of sub-block s (0..7) from the 12 scale bytes at `sc`.
void scale_min_k4(uint sc, uint s, out float scale, out float mn) {
  if (s < 4u) {
    scale = float(rd8(sc + s) & 63u);
    mn = float(rd8(sc + s + 4u) & 63u);
  } else {
    const uint b = rd8(sc + s + 4u);
    scale = float((b & 15u) | ((rd8(sc + s - 4u) >> 6) << 4));
    mn = float((b >> 4) | ((rd8(sc + s) >> 6) << 4));
  }
}
#endif

// Dot of 32-value unit u of the row at byte rb with x[xo .. xo + 32).
float unit_dot(uint rb, uint u, uint xo) {
#if defined(WT_Q4_0) || defined(WT_IQ4_NL)
  const uint b = rb + u * 18u;
  return f16at(b) * nibbles_dot(b + 2u, xo);
#elif defined(WT_MXFP4)
  const uint b = rb + u * 17u;
  const uint e = rd8(b);
  const float d = uintBitsToFloat(e == 0u ? 0x00400000u : e << 23);  // 2^(e-127); e = 0: the denormal 2^-127
  return (0.5 * d) * nibbles_dot(b + 1u, xo);
#elif defined(WT_Q4_1)  // d, m, 16 bytes of nibbles: d * q + m
  const uint b = rb + u * 20u;
  float sx;
  const float s = quant_dot(b + 4u, 0u, xo, sx);
  return f16at(b) * s + f16at(b + 2u) * sx;
#elif defined(WT_Q5_0)  // d, 4 bytes of fifth bits, 16 bytes of nibbles: d * (q - 16)
  const uint b = rb + u * 22u;
  float sx;
  const float s = quant_dot(b + 6u, rd32(b + 2u), xo, sx);
  return f16at(b) * (s - 16.0 * sx);
#elif defined(WT_Q5_1)  // d, m, 4 bytes of fifth bits, 16 bytes of nibbles: d * q + m
  const uint b = rb + u * 24u;
  float sx;
  const float s = quant_dot(b + 8u, rd32(b + 4u), xo, sx);
  return f16at(b) * s + f16at(b + 2u) * sx;
#elif defined(WT_Q8_0)
  const uint b = rb + u * 34u;
  float s = 0.0;
  for (uint k = 0u; k < 8u; ++k) {
    const uint v = rd32(b + 2u + 4u * k);
    for (uint j = 0u; j < 4u; ++j) s += float(sbyte(v, j)) * x[xo + 4u * k + j];
  }
  return f16at(b) * s;
#elif defined(WT_Q4_K) || defined(WT_Q5_K)
#if defined(WT_Q4_K)
  const uint b = rb + (u >> 3) * 144u, qs = b + 16u;
#else
  const uint b = rb + (u >> 3) * 176u, qh = b + 16u, qs = b + 48u;
#endif
  const uint s = u & 7u;
  float sc, mn;
  scale_min_k4(b + 4u, s, sc, mn);
  const uint q0 = qs + 32u * (s >> 1), shift = 4u * (s & 1u);
  float sq = 0.0, sx = 0.0;
  for (uint k = 0u; k < 8u; ++k) {
    const uint v = rd32(q0 + 4u * k);
#if defined(WT_Q5_K)
    const uint h = rd32(qh + 4u * k);
#endif
    for (uint j = 0u; j < 4u; ++j) {
      uint q = (v >> (8u * j + shift)) & 15u;
#if defined(WT_Q5_K)
      q |= ((h >> (8u * j + s)) & 1u) << 4;
#endif
      const float xv = x[xo + 4u * k + j];
      sq += float(q) * xv;
      sx += xv;
    }
  }
  return (f16at(b) * sc) * sq - (f16at(b + 2u) * mn) * sx;
#elif defined(WT_Q6_K)
  const uint b = rb + (u >> 3) * 210u;
  const uint s = u & 7u, c = s >> 2, k4 = s & 3u;
  const uint ql = b + 64u * c + 32u * (k4 & 1u), lshift = 4u * (k4 >> 1);
  const uint qh = b + 128u + 32u * c, hshift = 2u * k4;
  float s0 = 0.0, s1 = 0.0;
  for (uint k = 0u; k < 8u; ++k) {
    const uint lv = rd32(ql + 4u * k), hv = rd32(qh + 4u * k);
    for (uint j = 0u; j < 4u; ++j) {
      const int q = int(((lv >> (8u * j + lshift)) & 15u) | (((hv >> (8u * j + hshift)) & 3u) << 4)) - 32;
      const float p = float(q) * x[xo + 4u * k + j];
      if (k < 4u) s0 += p; else s1 += p;
    }
  }
  const float d = f16at(b + 208u);
  return (d * float(sbyte(rd8(b + 192u + 2u * s), 0u))) * s0 + (d * float(sbyte(rd8(b + 193u + 2u * s), 0u))) * s1;
#elif defined(WT_IQ4_XS)
  const uint b = rb + (u >> 3) * 136u, g = u & 7u;
  const uint ls = ((rd8(b + 4u + (g >> 1)) >> (4u * (g & 1u))) & 15u) | (((rd16(b + 2u) >> (2u * g)) & 3u) << 4);
  const uint q = b + 8u + 16u * g;
  float s = 0.0;
  for (uint k = 0u; k < 4u; ++k) {
    const uint v = rd32(q + 4u * k);
    for (uint j = 0u; j < 4u; ++j) {
      const uint bb = (v >> (8u * j)) & 0xFFu;
      s += float(kIq4nl[bb & 15u]) * x[xo + 4u * k + j] + float(kIq4nl[bb >> 4]) * x[xo + 16u + 4u * k + j];
    }
  }
  return (f16at(b) * float(int(ls) - 32)) * s;
#else
  return 0.0;
#endif
}

void main() {
  const uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint t0 = gl_WorkGroupID.z * NT;
  const uint tid = gl_LocalInvocationID.x;
  if (row >= pc.rows) return;  // the whole workgroup leaves together
  const uint rb = row * pc.row_bytes;
  const uint nt = min(NT, pc.n_tok - t0);
  // Each token's sum runs over the same units in the same order as with NT = 1, and the same tree
  // adds the threads' parts: a token's result does not depend on the others in its workgroup.
  float acc[kMaxNt];
  for (uint j = 0u; j < kMaxNt; ++j) acc[j] = 0.0;
#if defined(WT_F32)
  for (uint i = tid; i < pc.cols; i += WG) {
    const float wv = uintBitsToFloat(w[(rb >> 2) + i]);
    for (uint j = 0u; j < nt; ++j) acc[j] += wv * x[(t0 + j) * pc.x_stride + i];
  }
#elif defined(WT_F16) || defined(WT_BF16)
  for (uint i = tid; i < pc.cols; i += WG) {
    const uint h = rd16(rb + 2u * i);
#if defined(WT_F16)
    const float wv = unpackHalf2x16(h).x;
#else
    const float wv = uintBitsToFloat(h << 16);
#endif
    for (uint j = 0u; j < nt; ++j) acc[j] += wv * x[(t0 + j) * pc.x_stride + i];
  }
#else
  const uint nu = pc.cols >> 5;
  for (uint u = tid; u < nu; u += WG)
    for (uint j = 0u; j < nt; ++j) acc[j] += unit_dot(rb, u, (t0 + j) * pc.x_stride + 32u * u);
#endif
  for (uint j = 0u; j < NT; ++j) partial[j * WG + tid] = acc[j];
  barrier();
  for (uint s = WG >> 1; s > 0u; s >>= 1) {
    if (tid < s)
      for (uint j = 0u; j < NT; ++j) partial[j * WG + tid] += partial[j * WG + tid + s];
    barrier();
  }
  if (tid == 0u)
    for (uint j = 0u; j < nt; ++j) y[pc.y_off + (t0 + j) * pc.y_stride + row] = partial[j * WG];
}
