#pragma once
// The value sum of attention, out = sum_j p[j] * v_j, in llama.cpp's CPU association (f32
// caches), with lanes fixed by each value's cell index in its KV view (a view whose raw part is
// padded to a multiple of 256, so cell mod 32 is what matters):
//   L = 32: ggml's f32 dot, used for a lone decode token (4 x 8 fused lanes, reduced
//           (0+2)+(1+3), then lo+hi and two horizontal adds);
//   L = 8:  its tiled f32 GEMM, used for a multi-token chunk (one 8-lane accumulator, then
//           lo+hi and (0+2)+(1+3)).
// Values quantized next (MLA's latent -> v_b) then round as there.
#include <algorithm>
#include <cmath>
#include <cstddef>

namespace strata {

// The lane count llama.cpp's association uses for a token: decode (solo) tokens go through
// the dot; chunks through the tiled GEMM, which needs the value width to be a multiple of 4.
inline int attn_sum_lanes(bool solo, int dv) { return solo || dv % 4 != 0 ? 32 : 8; }

// cell(j): cell index of value j (ascending in j); row(j): its dv floats.
template <typename CellFn, typename RowFn>
void attn_value_sum(const float* p, int n, int dv, CellFn cell, RowFn row, float* out, float* lanes /*[dv * L]*/, int L) {
  std::fill(lanes, lanes + static_cast<size_t>(dv) * L, 0.0f);
  for (int j = 0; j < n; ++j) {
    const float pj = p[j];
    if (pj == 0.0f) continue;  // fma(0, v, acc) == acc
    const float* vr = row(j);
    float* ln = lanes + (cell(j) & (L - 1));
    for (int d = 0; d < dv; ++d) ln[static_cast<size_t>(d) * L] = std::fma(vr[d], pj, ln[static_cast<size_t>(d) * L]);
  }
  for (int d = 0; d < dv; ++d) {
    const float* b = lanes + static_cast<size_t>(d) * L;
    if (L == 32) {
      float a[8];
      for (int l = 0; l < 8; ++l) a[l] = (b[l] + b[16 + l]) + (b[8 + l] + b[24 + l]);
      const float t0 = a[0] + a[4], t1 = a[1] + a[5], t2 = a[2] + a[6], t3 = a[3] + a[7];
      out[d] = (t0 + t1) + (t2 + t3);
    } else {
      const float t0 = b[0] + b[4], t1 = b[1] + b[5], t2 = b[2] + b[6], t3 = b[3] + b[7];
      out[d] = (t0 + t2) + (t1 + t3);
    }
  }
}

}  // namespace strata
