#version 450
// Activations rounded as the CPU path quantizes them before its dot products (kernels/: the
// weight type's vec_dot_type), written back as f32 so the matvec shaders read them unchanged:
// MODE 0: Q8_0 / Q8_1 blocks of 32: d = amax / 127, q = roundEven(x * 127 / amax), y = q * f16(d);
// MODE 1: Q8_K blocks of 256: max = the first value of largest magnitude, s = -127 / max,
//         q = min(127, roundEven(s * x)), y = q / s;
// MODE 2: F16: y = f16(x) (round to nearest even); MODE 3: BF16: y = bf16(x) (nearest even, NaN kept quiet).
// One invocation per block (MODE 0, 1) or value (2, 3). Divisions take one Newton step (div_rn);
// still, a device's fma need not be fused, so a scale may be a last bit off the CPU's and a q one
// step off at a tie; the products over these values are the CPU's within f32 rounding.
#extension GL_GOOGLE_include_directive : require
layout(constant_id = 0) const uint MODE = 0;
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Xt { float x[]; };
layout(std430, binding = 1) writeonly buffer Yt { float y[]; };
layout(push_constant) uniform Push { uint n; } pc;  // values (a multiple of the block)

#include "f16.glsl"

// a / b closer to the CPU's correctly rounded division (Vulkan allows 2.5 ulp): one Newton step,
// exact where the device fuses the fma.
float div_rn(float a, float b) {
  const float q = a / b;
  return fma(fma(-q, b, a), 1.0 / b, q);
}

void main() {
  const uint i = gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * 64u) + gl_GlobalInvocationID.x;
  if (MODE == 2u) {
    if (i < pc.n) y[i] = unpackHalf2x16(f32_to_f16(x[i])).x;
    return;
  }
  if (MODE == 3u) {
    if (i >= pc.n) return;
    const uint u = floatBitsToUint(x[i]);
    const uint b = (u & 0x7FFFFFFFu) > 0x7F800000u ? ((u >> 16) | 64u) : ((u + (0x7FFFu + ((u >> 16) & 1u))) >> 16);
    y[i] = uintBitsToFloat(b << 16);
    return;
  }
  const uint bs = MODE == 0u ? 32u : 256u, o = i * bs;
  if (o >= pc.n) return;
  float amax = 0.0, mx = 0.0;
  for (uint j = 0u; j < bs; ++j) {
    const float a = abs(x[o + j]);
    if (a > amax) {
      amax = a;
      mx = x[o + j];
    }
  }
  if (MODE == 0u) {
    const float d = unpackHalf2x16(f32_to_f16(div_rn(amax, 127.0))).x, id = amax != 0.0 ? div_rn(127.0, amax) : 0.0;
    for (uint j = 0u; j < bs; ++j) y[o + j] = roundEven(x[o + j] * id) * d;
  } else if (amax == 0.0) {
    for (uint j = 0u; j < bs; ++j) y[o + j] = 0.0;
  } else {
    const float s = div_rn(-127.0, mx), d = div_rn(1.0, s);
    for (uint j = 0u; j < bs; ++j) y[o + j] = min(127.0, roundEven(s * x[o + j])) * d;
  }
}
