#pragma once
// The seam between a model and the device that runs its layers. Model::forward computes the
// batch's bookkeeping, then hands the layers to the executor, then computes the output head on
// the CPU from State::x. With no executor set the CPU runs them: the code that always ran them
// (Model's pre-norm residual loop, or the architecture's own ArchDef::run_layers), unchanged.
// A device executor (model/vulkan_executor.h) owns where each layer's tensors live and runs
// attention, norms and the dense FFN on its device; architecture files do not know it exists.
#include <string>

namespace strata {

struct FwdCtx;

class LayerExecutor {
 public:
  virtual ~LayerExecutor() = default;
  // For reports: "vulkan: llvmpipe (LLVM 15.0.6, 256 bits)".
  virtual std::string name() const = 0;
  // Runs every layer for c.b's tokens: the embeddings of c.b.tokens in, the final hidden rows
  // [c.b.n, n_embd] (before the output norm) out in c.st.x. Throws strata::Error on failure; the
  // engine then resets the slots of the pass, as after any failed pass.
  virtual void run_layers(FwdCtx& c) = 0;
};

}  // namespace strata
