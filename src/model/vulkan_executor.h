#pragma once
// The first Vulkan executor (issue 35): GQA models (llama, qwen3, their MoE forms) run on the GPU
// layer by layer, with their dense weights, routers, shared experts and an f32 KV cache in device
// memory. Routed experts stay with the expert tier on the CPU (resident, or streamed under
// --ram-budget): per MoE layer the normalized rows and the router's product come down, the
// routed experts' sum goes up. The embeddings go up and the final rows come down once per pass
// (the output head stays on the CPU). Several sequences per pass (the server's slots): each has
// n_ctx rows of the device's KV cache, and a row's results do not depend on the others in the pass.
#include <memory>

#include "gpu/device.h"
#include "model/executor.h"

namespace strata {

class Model;

// Uploads the model's layer weights to `dev` and allocates a KV cache of n_ctx positions for each
// of n_seq sequences.
// Throws strata::Error naming what this executor does not run (the architecture, a layer's
// attention or FFN kind, a tensor's weight type) or what does not fit.
std::unique_ptr<LayerExecutor> make_vulkan_executor(std::unique_ptr<gpu::Device> dev, const Model& model, int n_ctx, int n_seq = 1);

}  // namespace strata
