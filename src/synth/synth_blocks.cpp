#include "synth/synth_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kernels/blocks.h"
#include "synth/synth_blocks_layout.h"

namespace strata {

uint64_t synth_mix(uint64_t a, uint64_t b) {
  SynthRng r(a ^ (b * 0xD6E8FEB86659FD93ull) ^ 0x2545F4914F6CDD1Dull);
  r.next();
  return r.next();
}

uint64_t synth_hash(const char* s, uint64_t n) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a
  for (uint64_t i = 0; i < n; ++i) h = (h ^ static_cast<uint8_t>(s[i])) * 0x100000001B3ull;
  return h;
}

void synth_fill_bytes(SynthRng& r, uint8_t* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = r.next();
    std::memcpy(p + i, &v, 8);
  }
  if (i < n) {
    const uint64_t v = r.next();
    std::memcpy(p + i, &v, n - i);
  }
}

namespace {

// Std of a uniform integer on [lo, hi].
constexpr double uniform_int_std(int lo, int hi) {
  const double n = hi - lo + 1;
  return n * n > 1 ? std::sqrt((n * n - 1) / 12.0) : 0.0;
}

// 6-bit sub-block scales (and mins) drawn from [16, 63]: their rms.
constexpr int kScLo = 16, kScHi = 63;
double sc_rms() {
  double s = 0;
  for (int v = kScLo; v <= kScHi; ++v) s += static_cast<double>(v) * v;
  return std::sqrt(s / (kScHi - kScLo + 1));
}
inline uint8_t rand_sc(uint64_t byte) { return static_cast<uint8_t>(kScLo + ((byte & 0xFF) * (kScHi - kScLo + 1) >> 8)); }

// Packs eight 6-bit scales and mins the way get_scale_min_k4 reads them.
void pack_k4_scales(const uint8_t sc[8], const uint8_t m[8], uint8_t out[12]) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

// Random scale jitter: each block's d is dv * [0.75, 1.25).
inline uint16_t jitter_f16(float dv, SynthRng& r) { return f32_to_f16(dv * (0.75f + 0.5f * r.uniform())); }


// Per-type generators over a run of blocks (or values for F32/F16).
void gen_f32(uint8_t* dst, uint64_t n, float sigma, SynthRng& r) {
  const float a = sigma * std::sqrt(3.0f);
  float* y = reinterpret_cast<float*>(dst);
  for (uint64_t i = 0; i < n; ++i) y[i] = a * r.symmetric();
}
void gen_f16(uint8_t* dst, uint64_t n, float sigma, SynthRng& r) {
  const float a = sigma * std::sqrt(3.0f);
  uint16_t* y = reinterpret_cast<uint16_t*>(dst);
  for (uint64_t i = 0; i < n; ++i) y[i] = f32_to_f16(a * r.symmetric());
}
void gen_q8_0(uint8_t* dst, uint64_t nb, float sigma, SynthRng& r) {
  const float dv = sigma / static_cast<float>(uniform_int_std(-127, 127));
  auto* b = reinterpret_cast<block_q8_0*>(dst);
  for (uint64_t i = 0; i < nb; ++i) {
    b[i].d = jitter_f16(dv, r);
    synth_fill_bytes(r, reinterpret_cast<uint8_t*>(b[i].qs), QK8_0);
    for (int k = 0; k < QK8_0; ++k)
      if (b[i].qs[k] == -128) b[i].qs[k] = -127;  // ggml never writes -128; some SIMD paths assume it
  }
}
void gen_q4_0(uint8_t* dst, uint64_t nb, float sigma, SynthRng& r) {
  const float dv = sigma / static_cast<float>(uniform_int_std(-8, 7));
  auto* b = reinterpret_cast<block_q4_0*>(dst);
  for (uint64_t i = 0; i < nb; ++i) {
    const uint64_t s = r.next();
    b[i].d = f32_to_f16((s & 1 ? -dv : dv) * (0.75f + 0.5f * static_cast<float>((s >> 8) & 0xFFFF) / 65536.0f));  // sign cancels the -0.5 mean
    synth_fill_bytes(r, b[i].qs, sizeof b[i].qs);
  }
}
void gen_q4_k(uint8_t* dst, uint64_t nb, float sigma, SynthRng& r) {
  // y = d*sc*q - dmin*m with q uniform on [0,15]; m = sc and dmin = 7.5 d make every sub-block zero-mean.
  const float dv = sigma / static_cast<float>(uniform_int_std(0, 15) * sc_rms());
  auto* b = reinterpret_cast<block_q4_K*>(dst);
  for (uint64_t i = 0; i < nb; ++i) {
    const float d = dv * (0.75f + 0.5f * r.uniform());
    b[i].d = f32_to_f16(d);
    b[i].dmin = f32_to_f16(7.5f * d);
    uint8_t sc[8];
    uint64_t s = r.next();
    for (int j = 0; j < 8; ++j, s >>= 8) sc[j] = rand_sc(s);
    pack_k4_scales(sc, sc, b[i].scales);
    synth_fill_bytes(r, b[i].qs, sizeof b[i].qs);
  }
}
void gen_q5_k(uint8_t* dst, uint64_t nb, float sigma, SynthRng& r) {
  const float dv = sigma / static_cast<float>(uniform_int_std(0, 31) * sc_rms());
  auto* b = reinterpret_cast<block_q5_K*>(dst);
  for (uint64_t i = 0; i < nb; ++i) {
    const float d = dv * (0.75f + 0.5f * r.uniform());
    b[i].d = f32_to_f16(d);
    b[i].dmin = f32_to_f16(15.5f * d);
    uint8_t sc[8];
    uint64_t s = r.next();
    for (int j = 0; j < 8; ++j, s >>= 8) sc[j] = rand_sc(s);
    pack_k4_scales(sc, sc, b[i].scales);
    synth_fill_bytes(r, b[i].qh, sizeof b[i].qh);
    synth_fill_bytes(r, b[i].qs, sizeof b[i].qs);
  }
}
void gen_q6_k(uint8_t* dst, uint64_t nb, float sigma, SynthRng& r) {
  // y = d*sc*(q-32), q uniform on [0,63]; random scale signs cancel the -0.5 mean.
  const float dv = sigma / static_cast<float>(uniform_int_std(-32, 31) * sc_rms());
  auto* b = reinterpret_cast<block_q6_K*>(dst);
  for (uint64_t i = 0; i < nb; ++i) {
    b[i].d = jitter_f16(dv, r);
    uint64_t s0 = r.next(), s1 = r.next(), sg = r.next();
    for (int j = 0; j < 16; ++j) {
      const uint64_t byte = j < 8 ? (s0 >> (8 * j)) : (s1 >> (8 * (j - 8)));
      const int v = rand_sc(byte);
      b[i].scales[j] = static_cast<int8_t>((sg >> j) & 1 ? -v : v);
    }
    synth_fill_bytes(r, b[i].ql, sizeof b[i].ql);
    synth_fill_bytes(r, b[i].qh, sizeof b[i].qh);
  }
}

using GenFn = void (*)(uint8_t*, uint64_t, float, SynthRng&);
GenFn gen_for(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return gen_f32;
    case GgmlType::F16: return gen_f16;
    case GgmlType::Q8_0: return gen_q8_0;
    case GgmlType::Q4_0: return gen_q4_0;
    case GgmlType::Q4_K: return gen_q4_k;
    case GgmlType::Q5_K: return gen_q5_k;
    case GgmlType::Q6_K: return gen_q6_k;
    default: return nullptr;
  }
}

// ---- quantizers from f32 (plain round-to-nearest; valid, not optimal) ----

inline int nearest(float x) { return static_cast<int>(std::lrintf(x)); }

void quant_q8_0(const float* x, uint8_t* dst, int64_t n) {
  auto* b = reinterpret_cast<block_q8_0*>(dst);
  for (int64_t i = 0; i < n / QK8_0; ++i, x += QK8_0) {
    float amax = 0;
    for (int k = 0; k < QK8_0; ++k) amax = std::max(amax, std::fabs(x[k]));
    const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    for (int k = 0; k < QK8_0; ++k) b[i].qs[k] = static_cast<int8_t>(std::clamp(nearest(x[k] * id), -127, 127));
  }
}
void quant_q4_0(const float* x, uint8_t* dst, int64_t n) {
  auto* b = reinterpret_cast<block_q4_0*>(dst);
  for (int64_t i = 0; i < n / QK4_0; ++i, x += QK4_0) {
    float amax = 0;
    for (int k = 0; k < QK4_0; ++k) amax = std::max(amax, std::fabs(x[k]));
    const float d = amax / 7.0f, id = d > 0 ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    for (int k = 0; k < QK4_0 / 2; ++k) {
      const int q0 = std::clamp(nearest(x[k] * id) + 8, 0, 15), q1 = std::clamp(nearest(x[k + 16] * id) + 8, 0, 15);
      b[i].qs[k] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}
void quant_q4_k(const float* x, uint8_t* dst, int64_t n) {
  auto* b = reinterpret_cast<block_q4_K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float scale[8], mn[8], smax = 0, mmax = 0;
    for (int j = 0; j < 8; ++j) {
      float lo = 0, hi = 0;  // min <= 0 (the offset is subtracted), max >= 0
      for (int k = 0; k < 32; ++k) lo = std::min(lo, x[32 * j + k]), hi = std::max(hi, x[32 * j + k]);
      scale[j] = (hi - lo) / 15.0f;
      mn[j] = -lo;
      smax = std::max(smax, scale[j]);
      mmax = std::max(mmax, mn[j]);
    }
    const float d = smax / 63.0f, dmin = mmax / 63.0f;
    b[i].d = f32_to_f16(d);
    b[i].dmin = f32_to_f16(dmin);
    const float dq = f16_to_f32(b[i].d), mq = f16_to_f32(b[i].dmin);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<uint8_t>(dq > 0 ? std::clamp(nearest(scale[j] / dq), 0, 63) : 0);
      m[j] = static_cast<uint8_t>(mq > 0 ? std::clamp(nearest(mn[j] / mq), 0, 63) : 0);
    }
    pack_k4_scales(sc, m, b[i].scales);
    for (int j = 0; j < 8; j += 2) {
      uint8_t* q = b[i].qs + 16 * j;  // 32 bytes hold sub-blocks j (low nibbles) and j+1 (high nibbles)
      for (int k = 0; k < 32; ++k) {
        int v[2];
        for (int h = 0; h < 2; ++h) {
          const float s = dq * sc[j + h], off = mq * m[j + h];
          v[h] = s > 0 ? std::clamp(nearest((x[32 * (j + h) + k] + off) / s), 0, 15) : 0;
        }
        q[k] = static_cast<uint8_t>(v[0] | (v[1] << 4));
      }
    }
  }
}
void quant_q6_k(const float* x, uint8_t* dst, int64_t n) {
  auto* b = reinterpret_cast<block_q6_K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float scale[16], smax = 0;
    for (int j = 0; j < 16; ++j) {
      float amax = 0;
      for (int k = 0; k < 16; ++k) amax = std::max(amax, std::fabs(x[16 * j + k]));
      scale[j] = amax / 31.0f;
      smax = std::max(smax, scale[j]);
    }
    const float d = smax / 127.0f;
    b[i].d = f32_to_f16(d);
    const float dq = f16_to_f32(b[i].d);
    int8_t sc[16];
    for (int j = 0; j < 16; ++j) sc[j] = static_cast<int8_t>(dq > 0 ? std::clamp(nearest(scale[j] / dq), 0, 127) : 0);
    std::memcpy(b[i].scales, sc, 16);
    uint8_t q[QK_K];
    for (int k = 0; k < QK_K; ++k) {
      const float s = dq * sc[k / 16];
      q[k] = static_cast<uint8_t>(s > 0 ? std::clamp(nearest(x[k] / s), -32, 31) + 32 : 32);
    }
    std::memset(b[i].ql, 0, sizeof b[i].ql);
    std::memset(b[i].qh, 0, sizeof b[i].qh);
    for (int h = 0; h < 2; ++h) {  // two halves of 128 values: ql 64 bytes, qh 32 bytes each
      const uint8_t* qq = q + 128 * h;
      uint8_t* ql = b[i].ql + 64 * h;
      uint8_t* qh = b[i].qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((qq[l] & 15) | ((qq[l + 64] & 15) << 4));
        ql[l + 32] = static_cast<uint8_t>((qq[l + 32] & 15) | ((qq[l + 96] & 15) << 4));
        qh[l] = static_cast<uint8_t>((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) | ((qq[l + 64] >> 4) << 4) | ((qq[l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace

bool synth_random_supported(GgmlType t) { return gen_for(t) != nullptr || synth_layout_supported(t); }

bool synth_quantize_supported(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::Q8_0: case GgmlType::Q4_0: case GgmlType::Q4_K: case GgmlType::Q6_K: return true;
    default: return false;
  }
}

void synth_fill_random(GgmlType t, uint8_t* dst, uint64_t nbytes, float sigma, uint64_t seed, ThreadPool* pool) {
  const GenFn gen = gen_for(t);
  STRATA_CHECK(gen || synth_layout_supported(t), "synth: no random generator for type {}", ggml_type_name(t));
  if (!gen) synth_layout_prepare(t);
  const auto& info = ggml_info(t);
  const uint64_t unit = static_cast<uint64_t>(info.type_size);  // bytes per block (per value for F32/F16)
  const uint64_t per = info.quantized ? 1 : static_cast<uint64_t>(info.block_size);
  STRATA_CHECK(nbytes % unit == 0, "synth: {} bytes is not a whole number of {} blocks", nbytes, info.name);
  const uint64_t n_units = nbytes / unit;
  constexpr uint64_t kChunkBytes = 1u << 20;  // fixed chunking keeps the bytes independent of the thread count
  const uint64_t chunk_units = std::max<uint64_t>(1, kChunkBytes / unit);
  const int64_t n_chunks = static_cast<int64_t>((n_units + chunk_units - 1) / chunk_units);
  auto work = [&](int64_t c0, int64_t c1, int) {
    for (int64_t c = c0; c < c1; ++c) {
      SynthRng r(synth_mix(seed, static_cast<uint64_t>(c)));
      const uint64_t u0 = static_cast<uint64_t>(c) * chunk_units, u1 = std::min(n_units, u0 + chunk_units);
      if (gen) gen(dst + u0 * unit, (u1 - u0) * per, sigma, r);
      else synth_layout_fill(t, dst + u0 * unit, u1 - u0, sigma, r);
    }
  };
  if (pool) pool->parallel_for(n_chunks, 1, work);
  else work(0, n_chunks, 0);
}

void synth_quantize(GgmlType t, const float* src, uint8_t* dst, int64_t n) {
  const auto& info = ggml_info(t);
  STRATA_CHECK(n % info.block_size == 0, "synth: {} values is not a whole number of {} blocks", n, info.name);
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(n)); return;
    case GgmlType::F16: {
      auto* y = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) y[i] = f32_to_f16(src[i]);
      return;
    }
    case GgmlType::Q8_0: quant_q8_0(src, dst, n); return;
    case GgmlType::Q4_0: quant_q4_0(src, dst, n); return;
    case GgmlType::Q4_K: quant_q4_k(src, dst, n); return;
    case GgmlType::Q6_K: quant_q6_k(src, dst, n); return;
    default: fail("synth: no quantizer for type {}", info.name);
  }
}

}  // namespace strata
