#version 450
// y[r, i] = x[r, i] / sqrt(mean(x[r]^2) + eps) * (has_w ? w[i] : 1); one workgroup per row.
layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer Xt { float x[]; };
layout(std430, binding = 1) readonly buffer Wt { float w[]; };
layout(std430, binding = 2) writeonly buffer Yt { float y[]; };
layout(push_constant) uniform Push {
  uint n;      // values per row
  uint has_w;  // 0: no weight (binding 1 is not read)
  float eps;
} pc;
shared float partial[WG];

void main() {
  const uint r = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
  const uint base = r * pc.n;
  float s = 0.0;
  for (uint i = tid; i < pc.n; i += WG) s += x[base + i] * x[base + i];
  partial[tid] = s;
  barrier();
  for (uint k = WG >> 1; k > 0u; k >>= 1) {
    if (tid < k) partial[tid] += partial[tid + k];
    barrier();
  }
  const float scale = 1.0 / sqrt(partial[0] / float(pc.n) + pc.eps);
  for (uint i = tid; i < pc.n; i += WG) y[base + i] = pc.has_w != 0u ? (x[base + i] * scale) * w[i] : x[base + i] * scale;
}
