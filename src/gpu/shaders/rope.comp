#version 450
// Rotary embedding in place on x [n_tok, n_heads, head_dim]: the first n_dims values of every
// head rotated by the angles of its token, given as (cos, sin) pairs cs [n_tok, n_dims] (the
// host's rope_cache: YaRN and rope_freqs included). neox: pairs (i, i + n_dims/2), else (2i, 2i+1).
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Xt { float x[]; };
layout(std430, binding = 1) readonly buffer Ct { float cs[]; };
layout(push_constant) uniform Push {
  uint head_dim;
  uint n_heads;
  uint n_dims;
  uint neox;
  uint n_tok;
} pc;

void main() {
  const uint half_dims = pc.n_dims >> 1;
  const uint i = gl_GlobalInvocationID.x;  // pair
  const uint h = gl_GlobalInvocationID.y;  // head
  const uint t = gl_GlobalInvocationID.z;  // token
  if (i >= half_dims || h >= pc.n_heads || t >= pc.n_tok) return;
  const uint base = (t * pc.n_heads + h) * pc.head_dim;
  const float c = cs[t * pc.n_dims + 2u * i], s = cs[t * pc.n_dims + 2u * i + 1u];
  const uint a = pc.neox != 0u ? base + i : base + 2u * i;
  const uint b = pc.neox != 0u ? base + i + half_dims : base + 2u * i + 1u;
  const float x0 = x[a], x1 = x[b];
  x[a] = x0 * c - x1 * s;
  x[b] = x0 * s + x1 * c;
}
