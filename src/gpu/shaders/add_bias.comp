#version 450
// x[r, i] += b[i] for rows of `width` values (a bias on every token's row).
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Xt { float x[]; };
layout(std430, binding = 1) readonly buffer Bt { float b[]; };
layout(push_constant) uniform Push { uint n, width; } pc;

void main() {
  const uint i = gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * 64u) + gl_GlobalInvocationID.x;
  if (i < pc.n) x[i] += b[i % pc.width];
}
