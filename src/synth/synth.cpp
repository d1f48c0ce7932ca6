// `strata synth`: plan the tensors of a real model shape, write its metadata, and fill every
// tensor at write time (one tensor in memory at a time).
#include "synth/synth.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <numeric>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "gguf/gguf_names.h"
#include "gguf/gguf_writer.h"
#include "synth/synth_blocks.h"
#include "synth/synth_vocab.h"

namespace strata {

uint64_t SynthTensor::nbytes() const {
  uint64_t n = 1;
  for (auto d : ne) n *= d;
  const auto& i = ggml_info(type);
  return n / static_cast<uint64_t>(i.block_size) * static_cast<uint64_t>(i.type_size);
}

namespace {

using tn::blk;

// Fraction of the token embedding along the shared direction u (the rest is noise). Skew 0 has
// no shared direction at all, so nothing but noise steers the routers.
constexpr float kEmbdSharedSkewed = 0.6f;
float embd_shared(const SynthSpec& s) { return s.skew > 0 ? kEmbdSharedSkewed : 0.0f; }
// Router boost of the most popular expert over the rank-r one: kRouterGain * skew * ln(r + 1)
// logit units (the router's noise has std 1).
constexpr float kRouterGain = 0.5f;

// llama.cpp's quantizer falls back when a row does not split into the type's 256-value blocks:
// the low-bit types to IQ4_NL, Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0 (32-value blocks), and
// to F16 when even those do not fit.
GgmlType fallback_type(GgmlType want) {
  switch (want) {
    case GgmlType::TQ1_0: case GgmlType::TQ2_0: return GgmlType::Q4_0;
    case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS: case GgmlType::IQ2_S: case GgmlType::IQ3_XXS: case GgmlType::IQ3_S:
    case GgmlType::IQ1_S: case GgmlType::IQ1_M: case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::IQ4_XS: return GgmlType::IQ4_NL;
    case GgmlType::Q4_K: return GgmlType::Q5_0;
    case GgmlType::Q5_K: return GgmlType::Q5_1;
    case GgmlType::Q6_K: return GgmlType::Q8_0;
    default: return GgmlType::F16;
  }
}
GgmlType fit_type(GgmlType want, uint64_t ne0) {
  if (ne0 % static_cast<uint64_t>(ggml_info(want).block_size) == 0) return want;
  const GgmlType f = fallback_type(want);
  if (ne0 % static_cast<uint64_t>(ggml_info(f).block_size) == 0) return f;
  return GgmlType::F16;
}

// Each residual branch adds about this rms (the embedding has rms 1), so the shared direction
// survives all layers: total added variance ~0.5.
float residual_gain(const SynthSpec& s) { return std::sqrt(0.5f / (2.0f * static_cast<float>(s.n_layer))); }

struct Planner {
  const SynthSpec& s;
  std::vector<SynthTensor> out;

  void norm(std::string name, uint64_t n, int layer) { out.push_back({std::move(name), GgmlType::F32, {n}, SynthRole::Norm, 0, layer}); }
  // A weight [rows, cols] (ne {cols, rows[, n3]}); gain scales the 1/sqrt(cols) std.
  void weight(std::string name, GgmlType t, std::vector<uint64_t> ne, int layer, float gain = 1.0f) {
    const float sigma = gain / std::sqrt(static_cast<float>(ne[0]));
    const GgmlType ft = fit_type(t, ne[0]);
    out.push_back({std::move(name), ft, std::move(ne), SynthRole::Weight, sigma, layer});
  }

  void moe(int l) {
    const uint64_t n = static_cast<uint64_t>(s.n_embd), ff = static_cast<uint64_t>(s.n_ff_exp), E = static_cast<uint64_t>(s.n_expert);
    const float g = residual_gain(s);
    out.push_back({blk(l, tn::kFfnGateInp), GgmlType::F32, {n, E}, SynthRole::Router, 0, l});
    if (s.sigmoid_gating) out.push_back({blk(l, tn::kExpProbsBias), GgmlType::F32, {E}, SynthRole::Bias, 0, l});
    const bool hi = l - s.n_dense_lead < s.n_hi_layers;
    const GgmlType gate_up = hi ? s.expert_hi_type : s.expert_type;
    const GgmlType down = hi ? s.expert_hi_type : s.expert_down_type.value_or(s.expert_type);
    weight(blk(l, tn::kFfnGateExps), gate_up, {n, ff, E}, l);
    weight(blk(l, tn::kFfnUpExps), gate_up, {n, ff, E}, l);
    weight(blk(l, tn::kFfnDownExps), down, {ff, n, E}, l, g);
  }

  void bias(std::string name, uint64_t n, int layer) { out.push_back({std::move(name), GgmlType::F32, {n}, SynthRole::Bias, 0, layer}); }

  void dense_ffn(int l) {
    const uint64_t n = static_cast<uint64_t>(s.n_embd), ff = static_cast<uint64_t>(s.n_ff);
    weight(blk(l, tn::kFfnGate), s.shexp_type, {n, ff}, l);
    weight(blk(l, tn::kFfnUp), s.shexp_type, {n, ff}, l);
    weight(blk(l, tn::kFfnDown), s.shexp_type, {ff, n}, l, residual_gain(s));
  }
  void shared_expert(int l) {
    if (s.n_shared <= 0) return;
    const uint64_t n = static_cast<uint64_t>(s.n_embd), sh = static_cast<uint64_t>(s.n_ff_exp) * static_cast<uint64_t>(s.n_shared);
    weight(blk(l, tn::kFfnGateShexp), s.shexp_type, {n, sh}, l);
    weight(blk(l, tn::kFfnUpShexp), s.shexp_type, {n, sh}, l);
    weight(blk(l, tn::kFfnDownShexp), s.shexp_type, {sh, n}, l, residual_gain(s));
  }

  // Grouped-query attention layers: qwen3moe, glm4moe, minimax-m2.
  void gqa_layer(int l) {
    const uint64_t n = static_cast<uint64_t>(s.n_embd), hd = static_cast<uint64_t>(s.head_dim);
    const uint64_t q = hd * static_cast<uint64_t>(s.n_head), kv = hd * static_cast<uint64_t>(s.n_head_kv);
    norm(blk(l, tn::kAttnNorm), n, l);
    weight(blk(l, tn::kAttnQ), s.attn_type, {n, q}, l);
    weight(blk(l, tn::kAttnK), s.attn_type, {n, kv}, l);
    weight(blk(l, tn::kAttnV), s.attn_type, {n, kv}, l);
    weight(blk(l, tn::kAttnOutput), s.attn_type, {q, n}, l, residual_gain(s));
    if (s.attn_bias) {
      bias(blk(l, tn::kAttnQBias), q, l);
      bias(blk(l, tn::kAttnKBias), kv, l);
      bias(blk(l, tn::kAttnVBias), kv, l);
    }
    if (s.qk_norm != SynthQkNorm::None) {
      const bool full = s.qk_norm == SynthQkNorm::Full;
      norm(blk(l, tn::kAttnQNorm), full ? q : hd, l);
      norm(blk(l, tn::kAttnKNorm), full ? kv : hd, l);
    }
    // GLM names its pre-FFN norm post_attention_norm.
    norm(blk(l, s.arch == SynthArch::Glm4Moe ? tn::kPostAttnNorm : tn::kFfnNorm), n, l);
    if (l < s.n_dense_lead) {
      dense_ffn(l);
      return;
    }
    moe(l);
    shared_expert(l);
  }

  // GLM's NextN block: a full layer plus the multi-token-prediction head's tensors.
  void nextn_layer(int l) {
    const uint64_t n = static_cast<uint64_t>(s.n_embd), V = static_cast<uint64_t>(s.n_vocab);
    gqa_layer(l);
    weight(blk(l, tn::kNextnEhProj), s.attn_type, {2 * n, n}, l);
    out.push_back({blk(l, tn::kNextnEmbedTokens), s.embd_type, {n, V}, SynthRole::Embedding, 0, l});
    norm(blk(l, tn::kNextnEnorm), n, l);
    norm(blk(l, tn::kNextnHnorm), n, l);
    weight(blk(l, tn::kNextnSharedHeadHead), s.output_type, {n, V}, l);
    norm(blk(l, tn::kNextnSharedHeadNorm), n, l);
  }

  // Qwen3.5 MoE: a Gated DeltaNet block, or every full_attn_every-th block gated full attention
  // (attn_q holds query | gate per head); every block MoE plus one sigmoid-gated shared expert.
  void qwen35moe_layer(int l) {
    const uint64_t n = static_cast<uint64_t>(s.n_embd), hd = static_cast<uint64_t>(s.head_dim);
    const float g = residual_gain(s);
    norm(blk(l, tn::kAttnNorm), n, l);
    if ((l + 1) % s.full_attn_every == 0) {
      const uint64_t q = hd * static_cast<uint64_t>(s.n_head), kv = hd * static_cast<uint64_t>(s.n_head_kv);
      weight(blk(l, tn::kAttnQ), s.attn_type, {n, 2 * q}, l);
      weight(blk(l, tn::kAttnK), s.attn_type, {n, kv}, l);
      weight(blk(l, tn::kAttnV), s.attn_type, {n, kv}, l);
      weight(blk(l, tn::kAttnOutput), s.attn_type, {q, n}, l, g);
      norm(blk(l, tn::kAttnQNorm), hd, l);
      norm(blk(l, tn::kAttnKNorm), hd, l);
    } else {
      const uint64_t S = static_cast<uint64_t>(s.ssm_state), hv = static_cast<uint64_t>(s.ssm_v_heads);
      const uint64_t v = hv * S, c = 2 * static_cast<uint64_t>(s.ssm_k_heads) * S + v;
      weight(blk(l, tn::kAttnQkv), s.attn_type, {n, c}, l);
      weight(blk(l, tn::kAttnGate), s.attn_type, {n, v}, l);
      weight(blk(l, tn::kSsmConv1d), GgmlType::F32, {static_cast<uint64_t>(s.ssm_conv), c}, l);  // kept f32, as llama.cpp's quantizer does
      norm(blk(l, tn::kSsmDtBias), hv, l);
      out.push_back({blk(l, tn::kSsmA), GgmlType::F32, {hv}, SynthRole::Decay, 0, l});
      weight(blk(l, tn::kSsmBeta), s.attn_type, {n, hv}, l);
      weight(blk(l, tn::kSsmAlpha), s.attn_type, {n, hv}, l);
      norm(blk(l, tn::kSsmNorm), S, l);
      weight(blk(l, tn::kSsmOut), s.attn_type, {v, n}, l, g);
    }
    norm(blk(l, tn::kPostAttnNorm), n, l);
    moe(l);
    const uint64_t sh = static_cast<uint64_t>(s.n_ff_exp) * static_cast<uint64_t>(s.n_shared);
    weight(blk(l, tn::kFfnGateInpShexp), GgmlType::F32, {n}, l);
    weight(blk(l, tn::kFfnGateShexp), s.shexp_type, {n, sh}, l);
    weight(blk(l, tn::kFfnUpShexp), s.shexp_type, {n, sh}, l);
    weight(blk(l, tn::kFfnDownShexp), s.shexp_type, {sh, n}, l, g);
  }

  // DeepSeek-V3.2's lightning indexer: queries from the q latent, one key per token, head weights.
  void indexer(int l) {
    const uint64_t n = static_cast<uint64_t>(s.n_embd), I = static_cast<uint64_t>(s.idx_heads), D = static_cast<uint64_t>(s.idx_dim);
    weight(blk(l, tn::kIndexerQB), s.attn_type, {static_cast<uint64_t>(s.q_lora), I * D}, l);
    weight(blk(l, tn::kIndexerAttnK), s.attn_type, {n, D}, l);
    norm(blk(l, tn::kIndexerKNorm), D, l);
    norm(blk(l, tn::kIndexerKNormBias), D, l);
    weight(blk(l, tn::kIndexerProj), s.attn_type, {n, I}, l);
  }

  void deepseek2_layer(int l) {
    const uint64_t n = static_cast<uint64_t>(s.n_embd), H = static_cast<uint64_t>(s.n_head);
    const uint64_t qh = static_cast<uint64_t>(s.qk_nope + s.qk_rope), kvl = static_cast<uint64_t>(s.kv_lora);
    const uint64_t nope = static_cast<uint64_t>(s.qk_nope), vh = static_cast<uint64_t>(s.v_head);
    const float g = residual_gain(s);
    norm(blk(l, tn::kAttnNorm), n, l);
    if (s.q_lora > 0) {
      const uint64_t ql = static_cast<uint64_t>(s.q_lora);
      weight(blk(l, tn::kAttnQA), s.attn_type, {n, ql}, l);
      norm(blk(l, tn::kAttnQANorm), ql, l);
      weight(blk(l, tn::kAttnQB), s.attn_type, {ql, H * qh}, l);
    } else {
      weight(blk(l, tn::kAttnQ), s.attn_type, {n, H * qh}, l);
    }
    weight(blk(l, tn::kAttnKvAMqa), s.attn_type, {n, kvl + static_cast<uint64_t>(s.qk_rope)}, l);
    norm(blk(l, tn::kAttnKvANorm), kvl, l);
    weight(blk(l, tn::kAttnKB), s.attn_type, {nope, kvl, H}, l);
    weight(blk(l, tn::kAttnVB), s.attn_type, {kvl, vh, H}, l);
    weight(blk(l, tn::kAttnOutput), s.attn_type, {H * vh, n}, l, g);
    if (s.arch == SynthArch::Deepseek32) indexer(l);
    norm(blk(l, tn::kFfnNorm), n, l);
    if (l < s.n_dense_lead) {
      dense_ffn(l);
      return;
    }
    moe(l);
    shared_expert(l);
  }
};

// Shared state of the fill callbacks.
struct FillCtx {
  const SynthSpec* spec = nullptr;
  std::vector<float> u_sign;  // [n_embd] +-1: the shared direction (unnormalized)
  ThreadPool* pool = nullptr;
};
struct FillJob {
  const FillCtx* c = nullptr;
  const SynthTensor* t = nullptr;
  uint64_t seed = 0;
};

void fill_norm(const FillJob& j, uint8_t* dst, uint64_t nbytes) {
  SynthRng r(j.seed);
  float* y = reinterpret_cast<float*>(dst);
  for (uint64_t i = 0; i < nbytes / 4; ++i) y[i] = 1.0f + 0.05f * r.symmetric();
}

// Decay rates: -(0.2 .. 1.2), the sign of qwen35moe's ssm_a = -exp(A_log) (a positive one would let
// the recurrent state grow without bound).
void fill_decay(const FillJob& j, uint8_t* dst, uint64_t nbytes) {
  SynthRng r(j.seed);
  float* y = reinterpret_cast<float*>(dst);
  for (uint64_t i = 0; i < nbytes / 4; ++i) y[i] = -(0.2f + r.uniform());
}

// Router rows: noise with logit std ~1 plus alpha_e * u; alpha_e falls with a random per-layer
// popularity rank (Zipf-like: boost -skew * gain * ln(rank + 1)).
void fill_router(const FillJob& j, uint8_t* dst, uint64_t) {
  const SynthSpec& s = *j.c->spec;
  const int n = s.n_embd, E = static_cast<int>(j.t->ne[1]);
  SynthRng r(j.seed);
  std::vector<int> rank(static_cast<size_t>(E));
  std::iota(rank.begin(), rank.end(), 0);
  for (int i = E - 1; i > 0; --i) std::swap(rank[static_cast<size_t>(i)], rank[static_cast<size_t>(r.next() % static_cast<uint64_t>(i + 1))]);
  // Expected u.x of the normalized router input: the embedding's shared part, diluted by the
  // residual additions of the layers below.
  const float depth = (static_cast<float>(j.t->layer) + 0.5f) / static_cast<float>(s.n_layer);
  const float ux = kEmbdSharedSkewed * std::sqrt(static_cast<float>(n)) / std::sqrt(1.0f + 0.5f * depth);
  const float noise = std::sqrt(3.0f / static_cast<float>(n));
  const std::vector<float>& u = j.c->u_sign;  // norm sqrt(n)
  float* y = reinterpret_cast<float*>(dst);
  for (int e = 0; e < E; ++e) {
    float* row = y + static_cast<size_t>(e) * n;
    double proj = 0;
    for (int k = 0; k < n; ++k) {
      row[k] = noise * r.symmetric();
      proj += static_cast<double>(row[k]) * u[static_cast<size_t>(k)];
    }
    if (s.skew <= 0) continue;
    // The noise part is made orthogonal to u, so only alpha_e steers along u.
    const float boost = -static_cast<float>(s.skew) * kRouterGain * std::log(static_cast<float>(rank[static_cast<size_t>(e)] + 1));
    const float alpha = boost / ux / std::sqrt(static_cast<float>(n)) - static_cast<float>(proj / n);
    for (int k = 0; k < n; ++k) row[k] += alpha * u[static_cast<size_t>(k)];
  }
}

// Token embeddings: rms-1 rows = noise + f * u_sign, quantized row by row.
void fill_embedding(const FillJob& j, uint8_t* dst, uint64_t) {
  const int n = static_cast<int>(j.t->ne[0]);
  const int64_t rows = static_cast<int64_t>(j.t->ne[1]);
  const uint64_t row_bytes = ggml_row_size(j.t->type, static_cast<uint64_t>(n));
  const float f = embd_shared(*j.c->spec);
  const float a = std::sqrt(3.0f * (1.0f - f * f));
  auto work = [&](int64_t r0, int64_t r1, int) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = r0; i < r1; ++i) {
      SynthRng r(synth_mix(j.seed, static_cast<uint64_t>(i)));
      for (int k = 0; k < n; ++k) x[static_cast<size_t>(k)] = a * r.symmetric() + f * j.c->u_sign[static_cast<size_t>(k)];
      synth_quantize(j.t->type, x.data(), dst + static_cast<uint64_t>(i) * row_bytes, n);
    }
  };
  if (j.c->pool) j.c->pool->parallel_for(rows, 256, work);
  else work(0, rows, 0);
}

// Selection bias of sigmoid routers: small, so the router's popularity skew still decides.
void fill_bias(const FillJob& j, uint8_t* dst, uint64_t nbytes) {
  SynthRng r(j.seed);
  float* y = reinterpret_cast<float*>(dst);
  for (uint64_t i = 0; i < nbytes / 4; ++i) y[i] = 0.01f * r.symmetric();
}

void fill(void* ctx, uint8_t* dst, uint64_t nbytes) {
  const FillJob& j = *static_cast<const FillJob*>(ctx);
  switch (j.t->role) {
    case SynthRole::Norm: fill_norm(j, dst, nbytes); return;
    case SynthRole::Bias: fill_bias(j, dst, nbytes); return;
    case SynthRole::Decay: fill_decay(j, dst, nbytes); return;
    case SynthRole::Router: fill_router(j, dst, nbytes); return;
    case SynthRole::Embedding: fill_embedding(j, dst, nbytes); return;
    case SynthRole::Weight: synth_fill_random(j.t->type, dst, nbytes, j.t->sigma, j.seed, j.c->pool); return;
  }
}

// Qwen3.5 MoE keys beyond the GQA ones: partial rotary dims with their M-RoPE sections (HF's
// default split of the rotary pairs, 11/11/10 for 32), the block pattern, the DeltaNet sizes and
// the shared expert's width.
void write_qwen35moe_metadata(GgufWriter& w, const SynthSpec& s) {
  auto k = [&](const char* name) { return key::arch_key(synth_arch_name(s.arch), name); };
  const int pairs = s.rope_dims / 2, sw = pairs / 3, sh = (pairs - sw) / 2;
  w.set_u32(k(key::kRopeDimensionCount), static_cast<uint32_t>(s.rope_dims));
  w.set_array_i32(k(key::kRopeDimensionSections), {pairs - sw - sh, sh, sw, 0});
  w.set_u32(k(key::kFullAttentionInterval), static_cast<uint32_t>(s.full_attn_every));
  w.set_u32(k(key::kSsmConvKernel), static_cast<uint32_t>(s.ssm_conv));
  w.set_u32(k(key::kSsmStateSize), static_cast<uint32_t>(s.ssm_state));
  w.set_u32(k(key::kSsmGroupCount), static_cast<uint32_t>(s.ssm_k_heads));
  w.set_u32(k(key::kSsmTimeStepRank), static_cast<uint32_t>(s.ssm_v_heads));
  w.set_u32(k(key::kSsmInnerSize), static_cast<uint32_t>(s.ssm_v_heads * s.ssm_state));
  w.set_u32(k(key::kExpertSharedFeedForwardLength), static_cast<uint32_t>(s.n_ff_exp * s.n_shared));
}

void write_metadata(GgufWriter& w, const SynthSpec& s) {
  const std::string a = synth_arch_name(s.arch);
  auto k = [&](const char* name) { return key::arch_key(a, name); };
  w.set_string(key::kArchitecture, a);
  w.set_string(key::kName, s.name);
  w.set_string(key::kDescription, fmt::format("synthetic random-weight model written by strata synth (seed {}, skew {}); NOT a trained model",
                                                  s.seed, s.skew));
  w.set_u32(key::kQuantizationVersion, 2);
  w.set_u32(key::kFileType, s.file_type != 0 ? s.file_type : s.expert_type == GgmlType::Q4_K ? 15u : 0u);  // 15: mostly Q4_K_M
  w.set_u32(k(key::kVocabSize), static_cast<uint32_t>(s.n_vocab));
  w.set_u32(k(key::kContextLength), static_cast<uint32_t>(s.n_ctx));
  w.set_u32(k(key::kEmbeddingLength), static_cast<uint32_t>(s.n_embd));
  w.set_u32(k(key::kBlockCount), static_cast<uint32_t>(s.n_layer + s.n_nextn));
  w.set_f32(k(key::kAttnRmsEps), s.rms_eps);
  w.set_f32(k(key::kRopeFreqBase), s.rope_base);
  w.set_u32(k(key::kExpertFeedForwardLength), static_cast<uint32_t>(s.n_ff_exp));
  w.set_u32(k(key::kExpertCount), static_cast<uint32_t>(s.n_expert));
  w.set_u32(k(key::kExpertUsedCount), static_cast<uint32_t>(s.n_expert_used));
  w.set_u32(k(key::kAttnHeadCount), static_cast<uint32_t>(s.n_head));
  if (s.n_ff > 0) w.set_u32(k(key::kFeedForwardLength), static_cast<uint32_t>(s.n_ff));
  if (!synth_is_mla(s.arch)) {
    w.set_u32(k(key::kAttnHeadCountKv), static_cast<uint32_t>(s.n_head_kv));
    w.set_u32(k(key::kAttnKeyLength), static_cast<uint32_t>(s.head_dim));
    w.set_u32(k(key::kAttnValueLength), static_cast<uint32_t>(s.head_dim));
    if (s.arch == SynthArch::Qwen3Moe || s.arch == SynthArch::Qwen35Moe) {
      w.set_bool(k(key::kExpertWeightsNorm), true);
      if (s.arch == SynthArch::Qwen35Moe) write_qwen35moe_metadata(w, s);
      return;
    }
    w.set_u32(k(key::kRopeDimensionCount), static_cast<uint32_t>(s.rope_dims > 0 ? s.rope_dims : s.head_dim));
    w.set_u32(k(key::kExpertGatingFunc), 2);  // sigmoid
    if (s.arch == SynthArch::MinimaxM2) return;
    w.set_u32(k(key::kExpertGroupCount), 1);
    w.set_u32(k(key::kExpertGroupUsedCount), 1);
    w.set_u32(k(key::kExpertSharedCount), static_cast<uint32_t>(s.n_shared));
    w.set_u32(k(key::kLeadingDenseBlockCount), static_cast<uint32_t>(s.n_dense_lead));
    w.set_f32(k(key::kExpertWeightsScale), s.routed_scale);
    w.set_bool(k(key::kExpertWeightsNorm), true);
    w.set_u32(k(key::kNextnPredictLayers), static_cast<uint32_t>(s.n_nextn));
    return;
  }
  // deepseek2/32, MLA in the split attn_k_b / attn_v_b layout: key/value_length describe the
  // absorbed (latent) heads, the *_mla keys the per-head q/k and v sizes.
  w.set_u32(k(key::kAttnHeadCountKv), 1);
  w.set_u32(k(key::kAttnQLoraRank), static_cast<uint32_t>(s.q_lora));
  w.set_u32(k(key::kAttnKvLoraRank), static_cast<uint32_t>(s.kv_lora));
  w.set_u32(k(key::kAttnKeyLength), static_cast<uint32_t>(s.kv_lora + s.qk_rope));
  w.set_u32(k(key::kAttnValueLength), static_cast<uint32_t>(s.kv_lora));
  w.set_u32(k(key::kAttnKeyLengthMla), static_cast<uint32_t>(s.qk_nope + s.qk_rope));
  w.set_u32(k(key::kAttnValueLengthMla), static_cast<uint32_t>(s.v_head));
  w.set_u32(k(key::kRopeDimensionCount), static_cast<uint32_t>(s.qk_rope));
  w.set_u32(k(key::kLeadingDenseBlockCount), static_cast<uint32_t>(s.n_dense_lead));
  w.set_u32(k(key::kExpertSharedCount), static_cast<uint32_t>(s.n_shared));
  w.set_f32(k(key::kExpertWeightsScale), s.routed_scale);
  w.set_bool(k(key::kExpertWeightsNorm), s.sigmoid_gating);
  w.set_u32(k(key::kExpertGatingFunc), s.sigmoid_gating ? 2 : 1);  // 2: sigmoid (DeepSeek-V3), 1: softmax (V2)
  if (s.n_group > 0) {
    w.set_u32(k(key::kExpertGroupCount), static_cast<uint32_t>(s.n_group));
    w.set_u32(k(key::kExpertGroupUsedCount), static_cast<uint32_t>(s.n_group_used));
  }
  if (s.arch == SynthArch::Deepseek32) {
    w.set_u32(k(key::kAttnIndexerHeadCount), static_cast<uint32_t>(s.idx_heads));
    w.set_u32(k(key::kAttnIndexerKeyLength), static_cast<uint32_t>(s.idx_dim));
    w.set_u32(k(key::kAttnIndexerTopK), static_cast<uint32_t>(s.idx_topk));
  }
  if (s.yarn_factor > 0) {
    w.set_string(k(key::kRopeScalingType), "yarn");
    w.set_f32(k(key::kRopeScalingFactor), s.yarn_factor);
    w.set_u32(k(key::kRopeScalingOrigCtx), static_cast<uint32_t>(s.yarn_orig_ctx));
    w.set_f32(k(key::kRopeScalingYarnLogMul), s.yarn_log_mul);
  }
}

}  // namespace

std::vector<SynthTensor> synth_plan(const SynthSpec& s) {
  s.validate();
  Planner p{s, {}};
  const uint64_t n = static_cast<uint64_t>(s.n_embd), V = static_cast<uint64_t>(s.n_vocab);
  p.out.push_back({tn::kTokenEmbd, s.embd_type, {n, V}, SynthRole::Embedding, 0, -1});
  p.norm(tn::kOutputNorm, n, -1);
  p.weight(tn::kOutput, s.output_type, {n, V}, -1);
  for (int l = 0; l < s.n_layer; ++l) {
    switch (s.arch) {
      case SynthArch::Deepseek2:
      case SynthArch::Deepseek32: p.deepseek2_layer(l); break;
      case SynthArch::Qwen35Moe: p.qwen35moe_layer(l); break;
      case SynthArch::Qwen3Moe:
      case SynthArch::Glm4Moe:
      case SynthArch::MinimaxM2: p.gqa_layer(l); break;
    }
  }
  for (int l = s.n_layer; l < s.n_layer + s.n_nextn; ++l) p.nextn_layer(l);
  return std::move(p.out);
}

SynthResult synth_write(const SynthSpec& s, const std::string& path, int threads) {
  const double t0 = clock_s();
  const std::vector<SynthTensor> plan = synth_plan(s);
  GgufWriter w;
  write_metadata(w, s);
  SynthVocab vocab = synth_vocab(s.arch, s.n_vocab, s.seed);
  if (!s.chat_template) vocab.chat_template.clear();
  synth_write_vocab(w, vocab);

  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  FillCtx ctx;
  ctx.spec = &s;
  ctx.pool = pool.get();
  SynthRng ur(synth_mix(s.seed, 0x75));
  ctx.u_sign.resize(static_cast<size_t>(s.n_embd));
  for (auto& v : ctx.u_sign) v = (ur.next() & 1) ? 1.0f : -1.0f;

  std::vector<FillJob> jobs(plan.size());
  SynthResult res;
  for (size_t i = 0; i < plan.size(); ++i) {
    const SynthTensor& t = plan[i];
    jobs[i] = FillJob{&ctx, &t, synth_mix(s.seed, synth_hash(t.name.data(), t.name.size()))};
    w.add_tensor_lazy(t.name, t.type, t.ne, fill, &jobs[i]);
    res.tensor_bytes += t.nbytes();
  }
  w.write(path);
  res.n_tensors = static_cast<int64_t>(plan.size());
  res.file_bytes = std::filesystem::file_size(path);
  res.seconds = clock_s() - t0;
  return res;
}

}  // namespace strata
