#version 450
// In place, row r of x [rows, n]: x *= scale, then exp(x - max) / sum; -inf cells give 0 and a
// row of only -inf cells gives zeros (as the CPU). has_sink: an extra logit `sink` joins the
// normalization without an output cell (gpt-oss attention sinks). One workgroup per row.
layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) buffer Xt { float x[]; };
layout(push_constant) uniform Push {
  uint n;
  float scale;
  uint has_sink;
  float sink;
} pc;
shared float partial[WG];

float reduce_max(float v, uint tid) {
  partial[tid] = v;
  barrier();
  for (uint k = WG >> 1; k > 0u; k >>= 1) {
    if (tid < k) partial[tid] = max(partial[tid], partial[tid + k]);
    barrier();
  }
  const float r = partial[0];
  barrier();
  return r;
}
float reduce_sum(float v, uint tid) {
  partial[tid] = v;
  barrier();
  for (uint k = WG >> 1; k > 0u; k >>= 1) {
    if (tid < k) partial[tid] += partial[tid + k];
    barrier();
  }
  const float r = partial[0];
  barrier();
  return r;
}

void main() {
  const uint base = gl_WorkGroupID.x * pc.n, tid = gl_LocalInvocationID.x;
  const float ninf = uintBitsToFloat(0xFF800000u);
  float m = ninf;
  for (uint i = tid; i < pc.n; i += WG) m = max(m, x[base + i] * pc.scale);
  m = reduce_max(m, tid);
  if (pc.has_sink != 0u) m = max(m, pc.sink);
  float s = 0.0;
  for (uint i = tid; i < pc.n; i += WG) {
    const float v = x[base + i] * pc.scale;
    const float e = v == ninf ? 0.0 : exp(v - m);
    x[base + i] = e;
    s += e;
  }
  s = reduce_sum(s, tid);
  if (pc.has_sink != 0u) s += exp(pc.sink - m);
  const float inv = s > 0.0 ? 1.0 / s : 0.0;
  for (uint i = tid; i < pc.n; i += WG) x[base + i] *= inv;
}
