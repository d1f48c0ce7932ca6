#version 450
// x[i] *= sigmoid(g[j]), j = (i / width) * stride + off + (per_value ? i % width : 0): a gate per
// value (a gated attention output: the gate half of each head's projection) or one per row of
// `width` values (a sigmoid-gated shared expert). sigmoid(v) = 1 / (1 + exp(-v)).
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Xt { float x[]; };
layout(std430, binding = 1) readonly buffer Gt { float g[]; };
layout(push_constant) uniform Push { uint n, width, stride, off, per_value; } pc;

void main() {
  const uint i = gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * 64u) + gl_GlobalInvocationID.x;
  if (i >= pc.n) return;
  const uint j = (i / pc.width) * pc.stride + pc.off + (pc.per_value != 0u ? i % pc.width : 0u);
  x[i] *= 1.0 / (1.0 + exp(-g[j]));
}
