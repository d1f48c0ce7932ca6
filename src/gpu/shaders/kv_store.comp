#version 450
// KV rows into the cache by position: dst row pos[t] = src row t (width values); a position past
// the cache's n_rows writes nothing (never outside the buffer). OUT_TYPE: 0 f32; 1 f16 (two values
// per word, rounded to nearest even as the CPU's KV cache; width even); 2 q8_0 (width a multiple
// of 32): the cache is [n_rows, width] int8 quants, then [n_rows, width / 32] f32 scales (each the
// f16 value the CPU's block would hold), quantized as the CPU's reference quantizer (d = amax / 127,
// q = x / d rounded half away from zero). One invocation per output word (q8_0: per block).
layout(constant_id = 0) const uint OUT_TYPE = 0;
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Src { float src[]; };
layout(std430, binding = 1) readonly buffer Pt { uint pos[]; };
layout(std430, binding = 2) writeonly buffer Dst { uint dst[]; };
layout(push_constant) uniform Push { uint width, n_tok, n_rows; } pc;
#include "f16.glsl"

void main() {
  const uint c = gl_GlobalInvocationID.x, t = gl_GlobalInvocationID.y;
  const uint units = OUT_TYPE == 2u ? pc.width / 32u : OUT_TYPE == 1u ? pc.width / 2u : pc.width;
  if (c >= units || t >= pc.n_tok || pos[t] >= pc.n_rows) return;
  if (OUT_TYPE == 2u) {
    const uint s = t * pc.width + 32u * c;
    float amax = 0.0;
    for (uint j = 0u; j < 32u; ++j) amax = max(amax, abs(src[s + j]));
    const float d = amax / 127.0;
    const float id = d != 0.0 ? 1.0 / d : 0.0;
    const uint q0 = (pos[t] * pc.width + 32u * c) / 4u;
    for (uint w = 0u; w < 8u; ++w) {
      uint packed = 0u;
      for (uint j = 0u; j < 4u; ++j) {
        const float x = src[s + 4u * w + j] * id;
        const int q = int(sign(x) * floor(abs(x) + 0.5));
        packed |= (uint(q) & 0xFFu) << (8u * j);
      }
      dst[q0 + w] = packed;
    }
    dst[pc.n_rows * pc.width / 4u + pos[t] * (pc.width / 32u) + c] = floatBitsToUint(unpackHalf2x16(f32_to_f16(d)).x);
  } else if (OUT_TYPE == 1u) {
    const uint s = t * pc.width + 2u * c;
    dst[pos[t] * units + c] = f32_to_f16(src[s]) | (f32_to_f16(src[s + 1u]) << 16);
  } else {
    dst[pos[t] * units + c] = floatBitsToUint(src[t * pc.width + c]);
  }
}
