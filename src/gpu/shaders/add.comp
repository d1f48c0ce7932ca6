#version 450
// x[i] += y[i] (the residual adds).
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Xt { float x[]; };
layout(std430, binding = 1) readonly buffer Yt { float y[]; };
layout(push_constant) uniform Push { uint n; } pc;

void main() {
  const uint i = gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * 64u) + gl_GlobalInvocationID.x;
  if (i < pc.n) x[i] += y[i];
}
