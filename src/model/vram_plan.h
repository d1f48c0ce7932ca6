#pragma once
// The VRAM side of the memory plan (--vram-budget): which layers the Vulkan executor holds on the
// device and what they take there. Scratch first (every pass needs it), then layer by layer from
// layer 0 its weights (norms, attention, the dense FFN or the router and shared experts; routed
// experts stay with the expert tier) and its KV cache, while they fit the budget: the leading
// layers placed run on the device, the rest on the CPU (the hidden rows cross once per pass).
// A plan needs no device (strata inspect): the device's figures are inputs.
#include <cstdint>
#include <string>
#include <vector>

#include "experts/tier_sim.h"
#include "gguf/ggml_type.h"
#include "gpu/device.h"
#include "model/model.h"
#include "model/upload_choice.h"

namespace strata {

// The default --vram-budget: the device-local heap less a reserve for the driver, the display and
// other programs: kVramReservePercent of it, at least kVramReserveMin.
inline constexpr uint64_t kVramReserveMin = 512ull << 20;
inline constexpr uint64_t kVramReservePercent = 10;
uint64_t default_vram_budget(uint64_t device_local_bytes);
// Every buffer is planned rounded up to this (the drivers' allocation alignment is at most this).
inline constexpr uint64_t kVramPlanAlign = 4096;

struct VramShape {
  int n_ctx = 0, n_seq = 1, n_batch = 512;  // the engine's: KV rows per sequence, sequences, tokens per pass
  GgmlType type_k = GgmlType::F16, type_v = GgmlType::F16;  // the KV cache's types (f32, f16 or q8_0 on the device)
  uint64_t budget = 0;                      // device-local bytes the executor may hold; 0: no limit
  uint64_t max_range = 0xFFFFFFF0ull;       // the device's storage range (how matrices split into parts)
  std::string device;                       // the device's name, for reports ("": planned without one)
  // Routed experts in VRAM (model/vram_experts.h) once every layer is placed: 0 none; kVramExpertsAuto
  // the budget's rest; else at most this many bytes of slots.
  int64_t experts = 0;
  // How the VRAM expert cache works (model/vram_experts.h: VramExpertOptions).
  TierMode tiers = TierMode::exclusive;
  std::string expert_policy = "default";
  uint64_t upload_per_pass = 64ull << 20;
  PpUpload pp = PpUpload::automatic;
};
inline constexpr int64_t kVramExpertsAuto = -1;

// The executor's scratch buffers, in 4-byte elements, for passes of n_batch tokens over n_ctx
// positions (the attention scores in dispatches that fit gpu::kAttnScratchBytes).
struct VulkanScratch {
  int64_t x = 0, xn = 0, xq = 0, q = 0, qg = 0, k = 0, v = 0, attn = 0, out = 0, shared = 0, gate = 0, up = 0, logits = 0;
  int64_t pos = 0, cells = 0, bases = 0, rope = 0, scores = 0;
  uint64_t bytes(uint64_t align) const;
};
VulkanScratch vulkan_scratch(const ModelConfig& cfg, const ModelWeights& w, int n_batch, int n_ctx);

// Which blocks of a layer the device runs. The others run on the CPU with the CPU path's code
// (the hidden rows come down to the host and go back up): attention kinds the device has no
// kernels for (MLA, Gated DeltaNet, a gated output), FFNs it does not run (a sigmoid-gated
// shared expert, a GLU activation other than SiLU). Their reasons name what is missing.
struct VulkanBlocks {
  bool attn = false, ffn = false;
  std::string attn_why, ffn_why;
};
std::vector<VulkanBlocks> vulkan_blocks(const ModelConfig& cfg, const ModelWeights& w);
// The first layer whose attention the device runs (its rotation table serves all of them); -1: none.
int vulkan_rope_layer(const std::vector<VulkanBlocks>& blocks);
// "attention of layers 0-23 (MLA attention), FFN of layer 3 (...)" ("" when the device runs every block).
std::string vulkan_cpu_blocks(const std::vector<VulkanBlocks>& blocks, int n_layers);

struct VramPlan {
  bool planned = false;
  std::string device;  // VramShape::device
  uint64_t budget = 0;
  GgmlType type_k = GgmlType::F16, type_v = GgmlType::F16;
  uint64_t weights = 0, kv = 0, scratch = 0;  // of the layers placed (scratch: 0 when none is)
  int n_layer = 0, gpu_layers = 0;            // layers 0..gpu_layers-1 on the device, the rest on the CPU
  std::vector<uint64_t> layer_weights, layer_kv;  // [n_layer] what each layer takes on the device
  std::string note;  // why some (or all) layers stay on the CPU; "" when all are placed
  std::string cpu_blocks;  // vulkan_cpu_blocks: blocks of the placed layers the CPU runs ("" none)
  uint64_t held = 0;  // device-local bytes the executor held once built (the device's count; it allocates nothing later)
  // The VRAM expert cache: whole slots of expert_slot_bytes, and its scratch; why none ("" when planned or not asked).
  int expert_slots = 0;
  uint64_t expert_slot_bytes = 0, experts = 0, expert_scratch = 0;
  std::string experts_note;
  uint64_t total() const { return weights + kv + scratch + experts + expert_scratch; }
  std::string describe() const;  // one line: "vram plan: 12 of 24 layers on the device ..."
};

// Why the Vulkan executor cannot run this model ("" when it can): an architecture with its own
// layer loop, no block the device runs, a KV cache type or shape.
std::string vulkan_unsupported(const ModelConfig& cfg, const ModelWeights& w, GgmlType type_k, GgmlType type_v);

// The placement of `cfg`'s layers under s.budget. Throws strata::Error for a KV type the device
// does not hold.
VramPlan plan_vram(const ModelConfig& cfg, const ModelWeights& w, const VramShape& s);

}  // namespace strata
