#pragma once
// Internal to the Vulkan executor (model/vulkan_executor.cpp) and its memory plan
// (model/vram_plan.cpp): one layer's tensors on the device, and the one list of what is uploaded,
// so the plan counts exactly what the executor allocates.
#include <string>
#include <vector>

#include "gpu/ops.h"
#include "model/model.h"
#include "model/vram_plan.h"

namespace strata {

struct GpuLayer {
  gpu::Buffer attn_norm, ffn_norm;  // [n_embd]
  gpu::Buffer q_norm, k_norm;  // [head_dim_k] (qk_norm), [n_head * head_dim_k] / [n_head_kv * head_dim_k] (qk_norm_full), or empty
  gpu::Buffer bq, bk, bv, bo;  // [n_head * head_dim_k], [n_head_kv * head_dim_k], [n_head_kv * head_dim_v], [n_embd] (or empty)
  gpu::Buffer sinks;           // [n_head] sink logits (or empty)
  gpu::DeviceMatrix wq, wk, wv, wo;
  gpu::DeviceMatrix gate, up, down;  // the dense FFN, or an MoE layer's shared expert (empty: none)
  gpu::DeviceMatrix router;          // [n_expert, n_embd] (MoE layers)
  gpu::DeviceMatrix shexp_gate_inp;  // [1, n_embd]: a sigmoid gate per token on the shared expert (or empty)
  // [n_seq * n_ctx, n_head_kv * head_dim_k], [.., n_head_kv * head_dim_v] in the cache's types: row seq * n_ctx + pos
  gpu::Buffer k_cache, v_cache;
};

// One tensor of a layer that goes to the device: a weight matrix or an f32 vector, and where it lands.
struct LayerTensor {
  std::string name;  // "blk.3.attn_q.weight"
  const QMatrix* mat = nullptr;
  const VecF32* vec = nullptr;  // required: an empty one is an error at upload
  gpu::DeviceMatrix GpuLayer::*dm = nullptr;
  gpu::Buffer GpuLayer::*buf = nullptr;
};

// The tensors of layer l that go to the device: those of the blocks it runs (model/vram_plan.h).
inline std::vector<LayerTensor> layer_tensors(const LayerConfig& lc, const LayerWeights& lw, int l, const VulkanBlocks& blocks) {
  const std::string b = "blk." + std::to_string(l) + ".";
  std::vector<LayerTensor> t;
  auto vec = [&](const VecF32& v, const char* name, gpu::Buffer GpuLayer::*dst) { t.push_back({b + name, nullptr, &v, nullptr, dst}); };
  auto opt = [&](const VecF32& v, const char* name, gpu::Buffer GpuLayer::*dst) {
    if (!v.empty()) vec(v, name, dst);
  };
  auto mat = [&](const QMatrix& m, const char* name, gpu::DeviceMatrix GpuLayer::*dst) { t.push_back({b + name, &m, nullptr, dst, nullptr}); };
  if (blocks.attn) {
    vec(lw.attn_norm, "attn_norm.weight", &GpuLayer::attn_norm);
    if (lc.qk_norm || lc.qk_norm_full) {
      vec(lw.q_norm, "attn_q_norm.weight", &GpuLayer::q_norm);
      vec(lw.k_norm, "attn_k_norm.weight", &GpuLayer::k_norm);
    }
    opt(lw.bq, "attn_q.bias", &GpuLayer::bq);
    opt(lw.bk, "attn_k.bias", &GpuLayer::bk);
    opt(lw.bv, "attn_v.bias", &GpuLayer::bv);
    opt(lw.bo, "attn_output.bias", &GpuLayer::bo);
    if (lc.sinks) vec(lw.sinks, "attn_sinks.weight", &GpuLayer::sinks);
    mat(lw.wq, "attn_q.weight", &GpuLayer::wq);
    mat(lw.wk, "attn_k.weight", &GpuLayer::wk);
    mat(lw.wv, "attn_v.weight", &GpuLayer::wv);
    mat(lw.wo, "attn_output.weight", &GpuLayer::wo);
  }
  if (!blocks.ffn) return t;
  vec(lw.ffn_norm, "ffn_norm.weight", &GpuLayer::ffn_norm);
  if (lc.ffn == FfnKind::Dense) {
    mat(lw.ffn_gate, "ffn_gate.weight", &GpuLayer::gate);
    mat(lw.ffn_up, "ffn_up.weight", &GpuLayer::up);
    mat(lw.ffn_down, "ffn_down.weight", &GpuLayer::down);
  } else {
    mat(lw.router, "ffn_gate_inp.weight", &GpuLayer::router);
    if (!lw.shexp_gate.empty()) {
      mat(lw.shexp_gate, "ffn_gate_shexp.weight", &GpuLayer::gate);
      mat(lw.shexp_up, "ffn_up_shexp.weight", &GpuLayer::up);
      mat(lw.shexp_down, "ffn_down_shexp.weight", &GpuLayer::down);
      if (lc.shexp_gate) mat(lw.shexp_gate_inp, "ffn_gate_inp_shexp.weight", &GpuLayer::shexp_gate_inp);
    }
  }
  return t;
}

}  // namespace strata
