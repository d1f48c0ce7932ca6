#pragma once
// The first Vulkan executor (issue 35): GQA models (llama, qwen3, their MoE forms) run on the GPU
// layer by layer, with their dense weights, routers, shared experts and the KV cache (f32, f16 or q8_0,
// as --cache-type-k/v) in device memory. Routed experts stay with the expert tier on the CPU
// (resident, or streamed under --ram-budget): per MoE layer the normalized rows and the router's
// product come down, the routed experts' sum goes up. The embeddings go up and the hidden rows
// come down once per pass (the output head stays on the CPU). Under --vram-budget it holds the
// leading layers that fit (model/vram_plan.h) and the CPU runs the rest. Several sequences per
// pass (the server's slots): each has n_ctx rows of the device's KV cache, and a row's results do
// not depend on the others in the pass.
#include <memory>

#include "gpu/device.h"
#include "model/executor.h"
#include "model/vram_plan.h"

namespace strata {

class Model;

// Plans the placement under shape.budget (0: default_vram_budget of the device's device-local
// heap; shape.max_range and shape.device come from the device), makes it the device's allocation
// limit, uploads the placed layers' weights and allocates their KV cache (n_ctx positions for
// each of n_seq sequences) and the scratch for passes of n_batch tokens. The plan goes to *plan.
// Throws strata::Error naming what this executor does not run (the architecture, a layer's
// attention or FFN kind, a tensor's weight type, a KV cache type) or, when not even layer 0
// fits the budget, the budget and what one layer needs.
std::unique_ptr<LayerExecutor> make_vulkan_executor(std::unique_ptr<gpu::Device> dev, const Model& model, VramShape shape,
                                                    VramPlan* plan = nullptr);

}  // namespace strata
