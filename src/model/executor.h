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
#include <vector>

namespace strata {

struct FwdCtx;
class VramExperts;

// The device-local memory an executor holds (its device's count of every allocation).
struct DeviceMemory {
  uint64_t used = 0, peak = 0, budget = 0;  // budget 0: none
};

// Where the time of a device's passes went, per layer it runs (seconds, accumulated).
struct DeviceLayerTimes {
  double wall_s = 0;  // the layer on the host, start to end
  double gpu_s = 0;   // the device's own time on the layer's work (its timestamps)
  double cpu_s = 0;   // host compute inside the layer: routed experts, blocks the device does not run
  double bus_s = 0;   // host time in copies between host and device
};
// What the VRAM expert cache (model/vram_experts.h) did since its last reset_counters().
struct VramExpertCounters {
  uint64_t passes = 0;
  uint64_t vram_hits = 0;    // (layer, expert) uses computed from VRAM
  uint64_t cpu = 0;          // ... computed on the CPU (RAM hits and disk reads)
  uint64_t offered = 0;      // RAM hits offered to the VRAM policy
  uint64_t uploads = 0, upload_bytes = 0;
  uint64_t evictions = 0;    // experts that left VRAM for others
  uint64_t cancelled = 0;    // admitted, but gone from RAM by the end of the pass: not uploaded
  uint64_t deferred = 0;     // not offered: the pass's upload bytes were spent
  uint64_t gpu_rows = 0;     // (token, expert) rows computed on the device
  uint64_t pp_uploads = 0, pp_upload_bytes = 0;  // experts uploaded for one pass by prompt processing's choice
  double upload_s = 0;       // host time in end_pass's uploads
};
// ... as the executor reports it, with the cache's shape (slots 0: the executor has none).
struct DeviceExpertStats : VramExpertCounters {
  int slots = 0, resident = 0;
  uint64_t slot_bytes = 0;
  std::string tiers;  // "exclusive" or "inclusive"
  double hit_rate() const { return vram_hits + cpu ? double(vram_hits) / double(vram_hits + cpu) : 0.0; }
};
// What the executor's passes cost since the last reset_stats().
struct DeviceStats {
  uint64_t passes = 0, tokens = 0;
  uint64_t bytes_up = 0, bytes_down = 0;  // over the bus during passes (weights at load not counted)
  double run_s = 0, gpu_s = 0, cpu_s = 0, bus_s = 0;  // sums over the layers (run_s: the executor's wall time)
  bool timestamps = false;                // gpu_s measured (the device's queue has timestamps)
  std::vector<DeviceLayerTimes> layers;   // [n_layers()]
  DeviceExpertStats experts;
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
  virtual DeviceStats stats() const { return {}; }
  virtual void reset_stats() {}
  // --prof: each layer's device work finishes before the next layer starts, so the device's time is
  // attributed to its own layer (otherwise work is timed where the host next waits for it).
  virtual void set_layer_sync(bool) {}
  // "" while the device works; once it was lost (a driver reset, a fault), why: its memory (the
  // layers' KV rows) is gone and every later pass fails with this message.
  virtual std::string lost() const { return ""; }
  // Its VRAM expert cache (model/vram_experts.h), if it has one.
  virtual VramExperts* vram_experts() { return nullptr; }
};

}  // namespace strata
