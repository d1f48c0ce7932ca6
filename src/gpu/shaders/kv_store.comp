#version 450
// KV rows into the cache by position: dst row pos[t] = src row t (width values); a position past
// the cache's n_rows writes nothing (never outside the buffer). The cache holds f32 (OUT_F16 = 0)
// or f16 (OUT_F16 = 1: two values per word, rounded to nearest even as the CPU's KV cache; width
// even). One invocation per output word.
layout(constant_id = 0) const uint OUT_F16 = 0;
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Src { float src[]; };
layout(std430, binding = 1) readonly buffer Pt { uint pos[]; };
layout(std430, binding = 2) writeonly buffer Dst { uint dst[]; };
layout(push_constant) uniform Push { uint width, n_tok, n_rows; } pc;
#include "f16.glsl"

void main() {
  const uint c = gl_GlobalInvocationID.x, t = gl_GlobalInvocationID.y;
  const uint words = OUT_F16 != 0u ? pc.width / 2u : pc.width;
  if (c >= words || t >= pc.n_tok || pos[t] >= pc.n_rows) return;
  if (OUT_F16 != 0u) {
    const uint s = t * pc.width + 2u * c;
    dst[pos[t] * words + c] = f32_to_f16(src[s]) | (f32_to_f16(src[s + 1u]) << 16);
  } else {
    dst[pos[t] * words + c] = floatBitsToUint(src[t * pc.width + c]);
  }
}
