// Activation quantizers with the arithmetic of llama.cpp's CPU matmul path (x * 127/absmax,
// rounded half to even), so activations get the same int8 values llama.cpp computes with.
// (The reference quantizers in quants_legacy.cpp reproduce ggml's *weight* quantization.)
#include <cmath>

#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/quants.h"

namespace strata {

void quantize_act_q8_0_scalar(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<block_q8_0*>(dst);
  for (int64_t b = 0; b < n / QK8_0; ++b, x += QK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[b].d = f32_to_f16(d);
    for (int j = 0; j < QK8_0; ++j) y[b].qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
  }
}

void quantize_act_q8_1_scalar(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<block_q8_1*>(dst);
  for (int64_t b = 0; b < n / QK8_1; ++b, x += QK8_1) {
    float amax = 0.0f;
    for (int j = 0; j < QK8_1; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[b].d = f32_to_f16(d);
    int sum = 0;
    for (int j = 0; j < QK8_1; ++j) {
      y[b].qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
      sum += y[b].qs[j];
    }
    y[b].s = f32_to_f16(d * static_cast<float>(sum));
  }
}

}  // namespace strata
