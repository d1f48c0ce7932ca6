#version 450
// KV rows into the cache by position: dst[pos[t] * width + c] = src[t * width + c]; a position
// past the cache's n_rows writes nothing (never outside the buffer).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Src { float src[]; };
layout(std430, binding = 1) readonly buffer Pt { uint pos[]; };
layout(std430, binding = 2) writeonly buffer Dst { float dst[]; };
layout(push_constant) uniform Push { uint width, n_tok, n_rows; } pc;

void main() {
  const uint c = gl_GlobalInvocationID.x, t = gl_GlobalInvocationID.y;
  if (c >= pc.width || t >= pc.n_tok || pos[t] >= pc.n_rows) return;
  dst[pos[t] * pc.width + c] = src[t * pc.width + c];
}
