// Random valid blocks for the types whose quant bits are all valid at random (every grid index,
// sign bit and sub-scale is in range): the i-quants, the ternary types, Q2_K/Q3_K and the
// 32-value fallbacks. Only where the super-block scale sits differs per type; its value comes
// from a one-time calibration through the scalar dequantizer, so the dequantized values have
// the requested std whatever the codebook.
#include "synth/synth_blocks_layout.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/quants.h"

namespace strata {
namespace {

// Where a block keeps its f16 scale d (and, for offset types, the f16 min that makes it zero-mean).
enum class ScaleAt { Front, Back, Iq1m };
struct Layout {
  GgmlType type;
  ScaleAt at;
  size_t d_offset;     // byte offset of d (Front/Back)
  int min_offset;      // byte offset of the min, or -1
  float min_ratio;     // min = min_ratio * d
};

constexpr Layout kLayouts[] = {
    {GgmlType::IQ2_XXS, ScaleAt::Front, 0, -1, 0},
    {GgmlType::IQ2_XS, ScaleAt::Front, 0, -1, 0},
    {GgmlType::IQ2_S, ScaleAt::Front, 0, -1, 0},
    {GgmlType::IQ3_XXS, ScaleAt::Front, 0, -1, 0},
    {GgmlType::IQ3_S, ScaleAt::Front, 0, -1, 0},
    {GgmlType::IQ1_S, ScaleAt::Front, 0, -1, 0},
    {GgmlType::IQ1_M, ScaleAt::Iq1m, 0, -1, 0},
    {GgmlType::IQ4_NL, ScaleAt::Front, 0, -1, 0},
    {GgmlType::IQ4_XS, ScaleAt::Front, 0, -1, 0},
    {GgmlType::Q5_0, ScaleAt::Front, 0, -1, 0},
    // y = d*q + m with q on [0, 31]: m = -15.5 d centres it.
    {GgmlType::Q5_1, ScaleAt::Front, 0, static_cast<int>(offsetof(block_q5_1, m)), -15.5f},
    {GgmlType::Q4_1, ScaleAt::Front, 0, static_cast<int>(offsetof(block_q4_1, m)), -7.5f},
    {GgmlType::TQ1_0, ScaleAt::Back, offsetof(block_tq1_0, d), -1, 0},
    {GgmlType::TQ2_0, ScaleAt::Back, offsetof(block_tq2_0, d), -1, 0},
    {GgmlType::Q3_K, ScaleAt::Back, offsetof(block_q3_K, d), -1, 0},
    // y = d*sc*q - dmin*m with q on [0, 3], sc and m uniform on [0, 15]: dmin = 1.5 d centres it.
    {GgmlType::Q2_K, ScaleAt::Back, offsetof(block_q2_K, d), static_cast<int>(offsetof(block_q2_K, dmin)), 1.5f},
};

const Layout* layout_of(GgmlType t) {
  for (const auto& l : kLayouts)
    if (l.type == t) return &l;
  return nullptr;
}

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// IQ1_M has no d field: the f16 scale is spread over the top nibbles of its four 16-bit scales.
void put_iq1m_scale(uint8_t* block, float v) {
  const uint16_t h = f32_to_f16(v);
  uint16_t sc[4];
  std::memcpy(sc, block + offsetof(block_iq1_m, scales), sizeof sc);
  for (int i = 0; i < 4; ++i) sc[i] = static_cast<uint16_t>((sc[i] & 0x0FFF) | (((h >> (4 * i)) & 0xF) << 12));
  std::memcpy(block + offsetof(block_iq1_m, scales), sc, sizeof sc);
}

void set_scale(const Layout& l, uint8_t* block, float d) {
  if (l.at == ScaleAt::Iq1m) {
    put_iq1m_scale(block, d);
    return;
  }
  put_f16(block + l.d_offset, d);
  if (l.min_offset >= 0) put_f16(block + l.min_offset, l.min_ratio * d);
}


// Rms of the dequantized values of random blocks with scale 1 (deterministic, computed once per type).
double unit_rms(const Layout& l) {
  constexpr int kBlocks = 64;
  const auto& info = ggml_info(l.type);
  const size_t bs = static_cast<size_t>(info.type_size), n = static_cast<size_t>(info.block_size);
  std::vector<uint8_t> raw(bs * kBlocks);
  std::vector<float> y(n * kBlocks);
  SynthRng r(0x5EED0000u + static_cast<uint64_t>(l.type));
  for (int b = 0; b < kBlocks; ++b) {
    synth_fill_bytes(r, raw.data() + bs * static_cast<size_t>(b), bs);
    set_scale(l, raw.data() + bs * static_cast<size_t>(b), 1.0f);
  }
  dequantize_row(l.type, raw.data(), y.data(), static_cast<int64_t>(y.size()));
  double s = 0;
  for (float v : y) s += static_cast<double>(v) * v;
  const double rms = std::sqrt(s / static_cast<double>(y.size()));
  return rms > 0 ? rms : 1.0;
}

double cached_unit_rms(const Layout& l) {
  static double cache[kGgmlTypeCount] = {};  // filled before any parallel use (see synth_layout_prepare)
  double& c = cache[static_cast<uint32_t>(l.type)];
  if (c == 0) c = unit_rms(l);
  return c;
}

}  // namespace

bool synth_layout_supported(GgmlType t) { return layout_of(t) != nullptr; }

void synth_layout_prepare(GgmlType t) {
  if (const Layout* l = layout_of(t)) cached_unit_rms(*l);
}

void synth_layout_fill(GgmlType t, uint8_t* dst, uint64_t n_blocks, float sigma, SynthRng& r) {
  const Layout& l = *layout_of(t);
  const size_t bs = static_cast<size_t>(ggml_info(t).type_size);
  const float dv = static_cast<float>(sigma / cached_unit_rms(l));
  for (uint64_t i = 0; i < n_blocks; ++i) {
    uint8_t* b = dst + bs * i;
    synth_fill_bytes(r, b, bs);
    const uint64_t s = r.next();
    // Random sign (cancels any mean of the codebook) and a +-25 % jitter per block.
    const float d = ((s & 1) ? -dv : dv) * (0.75f + 0.5f * static_cast<float>((s >> 8) & 0xFFFF) / 65536.0f);
    set_scale(l, b, d);
  }
}

}  // namespace strata
