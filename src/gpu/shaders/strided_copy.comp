#version 450
// y[i] = x[(i / width) * stride + off + i % width]: rows of `width` values taken out of wider rows
// (the query heads out of a gated projection's [query | gate] per head).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Xt { float x[]; };
layout(std430, binding = 1) writeonly buffer Yt { float y[]; };
layout(push_constant) uniform Push { uint n, width, stride, off; } pc;

void main() {
  const uint i = gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * 64u) + gl_GlobalInvocationID.x;
  if (i < pc.n) y[i] = x[(i / pc.width) * pc.stride + pc.off + i % pc.width];
}
