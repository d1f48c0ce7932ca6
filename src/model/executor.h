#pragma once
// The seam between a model and the device that runs its layers. Model::forward computes the
// batch's bookkeeping, then hands the layers to the executor, then computes the output head on
// the CPU from State::x. With no executor set the CPU runs them: the code that always ran them
// (Model's pre-norm residual loop, or the architecture's own ArchDef::run_layers), unchanged.
// A device executor (model/vulkan_executor.h) owns where each layer's tensors live and runs
// attention, norms and the dense FFN on its device; architecture files do not know it exists.
// An executor may hold only the leading layers (what fits --vram-budget): the CPU runs the rest
// of the pre-norm loop from the hidden rows it leaves in State::x.
#include <cstdint>
#include <string>

namespace strata {

struct FwdCtx;

// The device-local memory an executor holds (its device's count of every allocation).
struct DeviceMemory {
  uint64_t used = 0, peak = 0, budget = 0;  // budget 0: none
};

class LayerExecutor {
 public:
  virtual ~LayerExecutor() = default;
  // For reports: "vulkan: llvmpipe (LLVM 15.0.6, 256 bits)".
  virtual std::string name() const = 0;
  // The leading layers it runs (0..n_layers()-1).
  virtual int n_layers() const = 0;
  virtual DeviceMemory device_memory() const { return {}; }
  // Runs layers 0..n_layers()-1 for c.b's tokens: the embeddings of c.b.tokens in, their hidden
  // rows [c.b.n, n_embd] out in c.st.x (the final ones, before the output norm, when it holds every
  // layer). Returns n_layers(): the CPU runs the layers after it. Throws strata::Error on failure;
  // the engine then resets the slots of the pass, as after any failed pass.
  virtual int run_layers(FwdCtx& c) = 0;
};

}  // namespace strata
