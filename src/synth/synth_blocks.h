#pragma once
// Valid random blocks for `strata synth`: fast random quant bits with finite f16 scales chosen so
// dequantized values are zero-mean with a target std, plus simple round-to-nearest quantizers
// from f32 for the few tensors that need structure (token embeddings).
#include <cstddef>
#include <cstdint>

#include "gguf/ggml_type.h"

namespace strata {

class ThreadPool;

// splitmix64: 8 random bytes per call.
struct SynthRng {
  uint64_t s;
  explicit SynthRng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
  float symmetric() { return 2.0f * uniform() - 1.0f; }                                    // [-1, 1)
};

// n random bytes.
void synth_fill_bytes(SynthRng& r, uint8_t* p, size_t n);

// Mixes two values into a seed (for per-tensor and per-chunk streams).
uint64_t synth_mix(uint64_t a, uint64_t b);
uint64_t synth_hash(const char* s, uint64_t n);

// Types with a random-block generator: F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, the i-quants
// (IQ1_S..IQ4_XS, IQ4_NL) and TQ1_0/TQ2_0.
bool synth_random_supported(GgmlType t);
// Types with a quantizer from f32: F32, F16, Q4_0, Q8_0, Q4_K, Q6_K.
bool synth_quantize_supported(GgmlType t);

// Fills nbytes (a whole number of blocks of t) with random blocks whose dequantized values have
// mean ~0 and std ~sigma. Deterministic in (seed) whatever the thread count: the stream is split
// into fixed chunks, each seeded by (seed, chunk index). pool may be null.
void synth_fill_random(GgmlType t, uint8_t* dst, uint64_t nbytes, float sigma, uint64_t seed, ThreadPool* pool);

// Quantizes n values (a multiple of t's block size) with plain round-to-nearest.
void synth_quantize(GgmlType t, const float* src, uint8_t* dst, int64_t n);

}  // namespace strata
