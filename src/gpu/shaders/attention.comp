#version 450
// Causal grouped-query attention, one workgroup per (head, token):
//   s_j = scale * q . K[base[t] + j]   for positions j <= pos[t] (and j > pos[t] - window when window > 0)
//   p = softmax(s) (an optional sink logit per head joins the sum), out = sum_j p_j V[base[t] + j]
// q [n_tok, n_head, dk]; K [kv_rows, n_kv, dk], V [kv_rows, n_kv, dv] (rows by cell: a token's
// sequence starts at row base[t], or 0 without bases); head h reads KV head h / (n_head / n_kv).
// Keys past kv_rows are not read. K and V hold f32 (K_TYPE / V_TYPE 0), f16 (1: two values per word)
// or q8_0 (2: kv_store's layout, [kv_rows, width] int8 quants then [kv_rows, width / 32] f32 scales).
// A dispatch covers tokens t0 .. t0 + groups.y - 1; their scores go through scratch
// [groups.y, n_head, n_keys] (the host splits a pass into dispatches that fit its scratch).
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint K_TYPE = 0;
layout(constant_id = 2) const uint V_TYPE = 0;
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer Qt { float q[]; };
layout(std430, binding = 1) readonly buffer Kt { uint kc[]; };
layout(std430, binding = 2) readonly buffer Vt { uint vc[]; };
layout(std430, binding = 3) readonly buffer Pt { uint pos[]; };
layout(std430, binding = 4) readonly buffer St { float sinks[]; };
layout(std430, binding = 5) writeonly buffer Ot { float o[]; };
layout(std430, binding = 6) buffer Wt { float sc[]; };
layout(std430, binding = 7) readonly buffer Bt { uint base[]; };
layout(push_constant) uniform Push {
  uint n_head, n_kv, dk, dv;
  uint n_keys;    // positions of a scratch row (every pos[t] < n_keys)
  uint window;    // 0: full causal attention
  uint has_sink;  // 0: binding 4 is not read
  float scale;
  uint has_base;  // 0: binding 7 is not read (one sequence, rows by position)
  uint kv_rows;   // rows of K and V bound
  uint t0;        // the first token of this dispatch
} pc;
shared float red[WG];

// Element e of the K / V cache (rows of n_kv * dk / n_kv * dv values, kv_rows of them).
float kat(uint e) {
  if (K_TYPE == 0u) return uintBitsToFloat(kc[e]);
  if (K_TYPE == 1u) {
    const vec2 v = unpackHalf2x16(kc[e >> 1]);
    return (e & 1u) != 0u ? v.y : v.x;
  }
  const int q = int(kc[e >> 2] << (24u - 8u * (e & 3u))) >> 24;
  return float(q) * uintBitsToFloat(kc[pc.kv_rows * pc.n_kv * pc.dk / 4u + (e >> 5)]);
}
float vat(uint e) {
  if (V_TYPE == 0u) return uintBitsToFloat(vc[e]);
  if (V_TYPE == 1u) {
    const vec2 v = unpackHalf2x16(vc[e >> 1]);
    return (e & 1u) != 0u ? v.y : v.x;
  }
  const int q = int(vc[e >> 2] << (24u - 8u * (e & 3u))) >> 24;
  return float(q) * uintBitsToFloat(vc[pc.kv_rows * pc.n_kv * pc.dv / 4u + (e >> 5)]);
}

float reduce(float v, bool is_max) {
  const uint tid = gl_LocalInvocationID.x;
  red[tid] = v;
  barrier();
  for (uint k = WG >> 1; k > 0u; k >>= 1) {
    if (tid < k) red[tid] = is_max ? max(red[tid], red[tid + k]) : red[tid] + red[tid + k];
    barrier();
  }
  const float r = red[0];
  barrier();
  return r;
}

void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y + pc.t0, tid = gl_LocalInvocationID.x;
  const uint kvh = h / (pc.n_head / pc.n_kv);
  const uint p = pos[t];
  const uint b0 = pc.has_base != 0u ? base[t] : 0u;
  const uint rows = pc.kv_rows > b0 ? pc.kv_rows - b0 : 0u;
  // Positions outside the scratch row or the bound rows are not read (empty when none is left).
  const uint last = min(min(p, pc.n_keys - 1u), rows == 0u ? 0u : rows - 1u);
  const uint first = (pc.window > 0u && p + 1u > pc.window) ? p + 1u - pc.window : 0u;
  const uint qb = (t * pc.n_head + h) * pc.dk;
  const uint sb = (gl_WorkGroupID.y * pc.n_head + h) * pc.n_keys;
  const float ninf = uintBitsToFloat(0xFF800000u);
  float m = ninf;
  const bool none = rows == 0u;
  for (uint j = first + tid; !none && j <= last; j += WG) {
    const uint kb = ((b0 + j) * pc.n_kv + kvh) * pc.dk;
    float s = 0.0;
    for (uint d = 0u; d < pc.dk; ++d) s += q[qb + d] * kat(kb + d);
    s *= pc.scale;
    sc[sb + j] = s;
    m = max(m, s);
  }
  m = reduce(m, true);
  if (pc.has_sink != 0u) m = max(m, sinks[h]);
  float sum = 0.0;
  for (uint j = first + tid; !none && j <= last; j += WG) {
    const float e = exp(sc[sb + j] - m);
    sc[sb + j] = e;
    sum += e;
  }
  sum = reduce(sum, false);
  if (pc.has_sink != 0u) sum += exp(sinks[h] - m);
  memoryBarrierBuffer();
  barrier();
  const float inv = sum > 0.0 ? 1.0 / sum : 0.0;
  const uint ob = (t * pc.n_head + h) * pc.dv;
  for (uint d = tid; d < pc.dv; d += WG) {
    float acc = 0.0;
    for (uint j = first; !none && j <= last; ++j) acc += sc[sb + j] * vat(((b0 + j) * pc.n_kv + kvh) * pc.dv + d);
    o[ob + d] = acc * inv;
  }
}
