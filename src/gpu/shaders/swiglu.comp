#version 450
// out[i] = silu(g[i]) * u[i], silu(v) = v / (1 + exp(-v)).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Gt { float g[]; };
layout(std430, binding = 1) readonly buffer Ut { float u[]; };
layout(std430, binding = 2) writeonly buffer Ot { float o[]; };
layout(push_constant) uniform Push { uint n; } pc;

void main() {
  const uint i = gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * 64u) + gl_GlobalInvocationID.x;
  if (i >= pc.n) return;
  const float v = g[i];
  o[i] = v / (1.0 + exp(-v)) * u[i];
}
