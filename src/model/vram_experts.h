#pragma once
// The VRAM tier of the expert store (issue 36): routed experts cached in device memory above the
// RAM tier (the expert provider: resident, or the streaming ExpertCache), under the VRAM plan's
// expert bytes, with the RAM tier's policy (one ExpertCacheState of slots).
//
// Per MoE layer the device runs (claim, as an ExpertOffload): the router has chosen; the experts it
// holds are computed on the device from the layer's normalized rows (gathered per expert, rounded
// as the CPU quantizes activations) while the CPU computes the others from RAM (read from disk on
// a miss); finish() brings the device's weighted rows into the slots the CPU sums in selection
// order, so the output does not depend on which side finished first. A miss never waits for an
// upload.
//
// Promotion (the rules of experts/tier_sim.h, which `strata cachesim --vram` replays): an expert
// the CPU computes that the RAM tier already held (a reuse) is offered to the VRAM policy;
// admitted, it takes a slot (the policy's victims leave VRAM) and its bytes go up at the end of the
// pass (end_pass), at most VramExpertOptions::upload_per_pass bytes per pass, so decoding never
// stalls behind uploads; then, when the tiers are exclusive, the RAM tier gives up its copy
// (ExpertProvider::give_up). Inclusive tiers keep it, and experts computed from VRAM are still
// requested from RAM (ExpertOffload::kAwayCopy), as a cache of copies works.
// Every decision is made on the engine thread in the pass's order: the placement, and so every
// bit of the output, is the same run to run.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "experts/cache_state.h"
#include "model/executor.h"
#include "experts/tier_sim.h"
#include "gpu/ops.h"
#include "model/forward.h"
#include "model/upload_choice.h"
#include "model/vram_plan.h"

namespace strata {

// Binding offsets inside slots and scratch are multiples of this (the largest
// minStorageBufferOffsetAlignment Vulkan allows).
inline constexpr uint64_t kVramExpertAlign = 256;
// Default bytes of promotions uploaded per pass.
inline constexpr uint64_t kVramUploadPerPass = 64ull << 20;  // VramShape::upload_per_pass's default
// Expert slots per device buffer, at most this many bytes each.
inline constexpr uint64_t kVramExpertSlab = 1ull << 30;

// Where the routed experts of the device's layers go in a VRAM slot, and the scratch their products
// need: the same for the plan (model/vram_plan.cpp) and the cache.
struct VramExpertLayout {
  uint64_t slot_bytes = 0;  // one expert's gate, up and down matrices, each at an aligned offset
  std::vector<uint8_t> eligible;                 // [n_layer] the layer's routed experts may live in VRAM
  std::vector<std::array<uint64_t, 3>> offset;   // [n_layer] gate, up, down inside a slot
  int64_t max_rows = 0;                          // (token, expert) rows of one pass (n_batch * k)
  int64_t width_x = 0, width_f = 0;              // the widest n_embd and expert n_ff of those layers
  uint64_t rows_bytes = 0;   // gathered rows (and products): max_rows rows, each expert's at an aligned offset
  uint64_t quant_bytes = 0;  // one expert's rows rounded (n_batch rows of the widest)
  uint64_t ff_bytes = 0;     // one expert's gate (and up) products
  uint64_t staging_bytes = 0;  // two slots: experts uploaded for one pass (prompt processing by cost)
  uint64_t scratch_bytes = 0;  // all of them, as the plan counts them
  std::string why;  // why no layer is eligible ("" when some is)
  bool any() const { return slot_bytes > 0; }
};
VramExpertLayout vram_expert_layout(const ModelConfig& cfg, const ModelWeights& w, const std::vector<VulkanBlocks>& blocks, int n_layers,
                                    int n_batch);

struct VramExpertOptions {
  uint64_t slot_bytes_total = 0;  // device memory for slots (whole slots are made)
  uint64_t upload_per_pass = kVramUploadPerPass;
  PpUpload pp = PpUpload::automatic;
  TierMode mode = TierMode::exclusive;  // exclusive_demote is cachesim's alone
  std::string policy = "default";
};

// VramExpertCounters: model/executor.h (the device's reports extend them).

class VramExperts final : public ExpertOffload {
 public:
  VramExperts(gpu::Device& dev, gpu::Ops& ops, const ModelConfig& cfg, const ModelWeights& w, VramExpertLayout layout,
              const VramExpertOptions& o);

  void claim(FwdCtx& c, int layer, const ExpertGroups& g, uint8_t* away) override;
  void finish(FwdCtx& c, int layer, const ExpertGroups& g, const uint8_t* away) override;
  void take(FwdCtx& c, int layer, int e, const ExpertMats& m) override;
  const UploadRates& rates() const { return rates_; }
  bool holds(int layer, int e) const override;

  // A pass begins (the policy's clock).
  void begin_pass();
  // The pass's promotions go up (the device is idle by now), and, exclusive, leave RAM.
  void end_pass(ExpertProvider& ram);
  // A pass failed: promotions not uploaded yet are forgotten (their slots freed).
  void abort_pass();

  int n_slots() const { return static_cast<int>(slot_owner_.size()); }
  const VramExpertCounters& counters() const { return c_; }
  void reset_counters() { c_ = {}; }
  const ExpertCacheState& state() const { return *state_; }
  const VramExpertLayout& layout() const { return lay_; }
  TierMode mode() const { return o_.mode; }
  // Whether expert e of `layer` is in VRAM with its bytes uploaded.
  bool uploaded(int layer, int e) const;
  // Loads experts into free slots (a warm start: hottest first), from `ram`'s bytes; no eviction,
  // at most the free slots; returns how many went up.
  int warm(ExpertProvider& ram, const std::vector<ExpertKey>& order);

 private:
  struct Pending {
    ExpertKey key;
    int slot;
  };
  size_t idx(int layer, int e) const { return static_cast<size_t>(layer) * n_expert_ + e; }
  gpu::MatrixView matrix(int layer, int slot, int part) const;
  gpu::MatrixView view(int layer, int part, const gpu::Buffer& buf, uint64_t base) const;
  void products(int layer, int e, int m, size_t i, const gpu::Buffer& buf, uint64_t base);
  void choose_pp(FwdCtx& c, int layer, const ExpertGroups& g, const int32_t* used, int n_used, uint8_t* away);
  uint64_t expert_bytes(int layer) const;
  void free_slot(ExpertKey k);
  void offer(ExpertKey k);
  void compute(FwdCtx& c, int layer, const ExpertGroups& g);
  void upload(ExpertKey k, int slot, const ExpertMats& m);
  void put(const gpu::MatrixView& v, const QMatrix& q, ExpertKey k);

  gpu::Device& dev_;
  gpu::Ops& ops_;
  const ModelConfig& cfg_;
  const ModelWeights& w_;
  VramExpertLayout lay_;
  VramExpertOptions o_;
  int n_expert_ = 0;
  std::unique_ptr<ExpertCacheState> state_;
  std::vector<gpu::Buffer> slabs_;
  int slots_per_slab_ = 0;
  std::vector<ExpertKey> slot_owner_;  // [n_slots] (layer -1: free)
  std::vector<int> free_slots_;
  std::vector<int32_t> slot_of_;       // [n_layer * n_expert] its slot, -1: none
  std::vector<uint8_t> ready_;         // [n_layer * n_expert] its bytes are on the device
  std::vector<Pending> pending_;       // admitted this pass, uploaded by end_pass
  uint64_t pass_bytes_ = 0;            // bytes admitted this pass
  uint64_t clock_ = 0;
  // The claimed experts of the current layer: their first gathered row and row offsets (bytes).
  std::vector<int32_t> claimed_;
  std::vector<uint8_t> staged_;          // [claimed] uploaded for this pass (take) rather than in a slot
  std::vector<int> rows_;                // [claimed] its rows in the pass
  std::vector<uint64_t> x_off_, y_off_;
  gpu::Buffer staging_[2];               // double-buffered: one uploads while the other's products run
  int next_staging_ = 0;
  UploadRates rates_;
  double t_claimed_ = 0, gpu_at_claim_ = 0;
  std::vector<float> host_x_, host_y_;  // gathered rows up, weighted... products down
  gpu::Buffer x_, xq_, g_, u_, y_;
  VramExpertCounters c_;
};

}  // namespace strata
