#pragma once
// The first Vulkan executor (issue 35): dense GQA models (llama, qwen3) run on the GPU layer by
// layer, with their weights and an f32 KV cache in device memory; the hidden rows cross the bus
// once per pass each way (embeddings up, final rows down; the output head stays on the CPU).
// One sequence (strata run / bench / perplexity).
#include <memory>

#include "gpu/device.h"
#include "model/executor.h"

namespace strata {

class Model;

// Uploads the model's layer weights to `dev` and allocates a KV cache of n_ctx positions.
// Throws strata::Error naming what this executor does not run (the architecture, a layer's
// attention or FFN kind, a tensor's weight type) or what does not fit.
std::unique_ptr<LayerExecutor> make_vulkan_executor(std::unique_ptr<gpu::Device> dev, const Model& model, int n_ctx);

}  // namespace strata
