#pragma once
// Low-bit stand-ins for missed experts (issue 37, --miss-model FILE.gguf; after HOBBIT): a second
// file of the same architecture and expert shapes at fewer bits (strata quantize --experts-only
// writes one). Per MoE layer, an expert that is not in memory (ExpertProvider::in_memory) and that
// no token of the pass chose among its first `keep` (the router's top J) is computed from the
// stand-in's bytes (mapped; read from disk as the kernels touch them) instead of being read whole
// into the expert cache. It sits between the model and its expert provider and watches the
// routing (it is both): the model's routing observers see each token's choices, in the router's
// order, before the layer's request.
// The same provider serves `--pp-model FILE.gguf` (a low-bit file for long prompts): keep 0 and
// active only while a long prompt is evaluated (set_active); the experts it computed from the
// stand-in then, hottest first (hottest()), are what the expert cache reads for decoding.
// With set_admit (--miss-admit), each expert computed from the stand-in is also asked of the inner
// provider as a prefetch (the expert cache reads it in the background if its policy admits it), so
// a later token that chooses it again finds the full expert in memory.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/limits.h"
#include "experts/cache_policy.h"
#include "model/model.h"

namespace strata {

// Throws strata::Error naming the first difference: architecture, vocabulary (size or a token),
// embedding width, layer count, a layer's FFN kind / experts / experts per token / expert width,
// or a routed expert tensor's shape or absence.
// option: the option named in the message ("--miss-model", "--pp-model").
void check_standin_matches(const Model& full, const Model& standin, std::string_view option = "--miss-model");

// Written by the thread that runs the passes, read by any (a server's /stats): relaxed atomics.
struct StandInCounters {
  std::atomic<uint64_t> experts{0};  // (layer, expert) computed from the stand-in, once per pass each
  std::atomic<uint64_t> bytes{0};    // the stand-in's bytes of those experts (what the kernels read at most)
  std::atomic<uint64_t> admits{0};   // of those, the full experts then asked of the inner provider (set_admit)
};

class StandInExperts final : public ExpertProvider, public RoutingObserver {
 public:
  // inner: the model's provider (the expert cache); standin: the stand-in model (checked against
  // the full model by the caller); keep: a token's first `keep` choices always come from inner.
  StandInExperts(ExpertProvider& inner, const Model& standin, int keep);

  void request(int layer, const int32_t* experts, int n) override;
  void prefetch(int layer, const int32_t* experts, int n) override { inner_.prefetch(layer, experts, n); }
  ExpertMats acquire(int layer, int e) override;
  int acquire_next(int layer, const int32_t* pending, int n, ExpertMats* out) override;
  bool try_acquire(int layer, int e, ExpertMats* out) override;
  void release(int layer, int e) override;
  bool in_memory(int layer, int e) const override { return inner_.in_memory(layer, e); }
  // A faster tier above takes the full model's bytes, never the stand-in's.
  bool peek(int layer, int e, ExpertMats* out) override { return inner_.peek(layer, e, out); }
  void give_up(int layer, int e) override { inner_.give_up(layer, e); }
  void on_abort() override { inner_.on_abort(); }
  void begin_batch(int n_tokens) override;

  void on_route(int layer, int token, const int32_t* ids, int k) override;

  const StandInCounters& counters() const { return c_; }
  // Inactive: every expert comes from the inner provider (the stand-in's counts stop). Between passes.
  void set_active(bool on) { active_ = on; }
  bool active() const { return active_; }
  void set_admit(bool on) { admit_ = on; }
  // The (layer, expert)s computed from the stand-in since the last call, most used first (ties:
  // lower layer, then lower expert), and each one's count of passes in `uses` when given; the counts
  // restart.
  std::vector<ExpertKey> hottest(std::vector<uint32_t>* uses = nullptr);

 private:
  bool standin(int layer, int e) const { return layer == layer_ && is_standin_[e]; }
  ExpertMats standin_mats(int e);
  void read_ahead(int layer, int e);

  ExpertProvider& inner_;
  MappedExperts mapped_;
  int keep_;
  int route_layer_ = -1;  // the layer whose routing `protected_` holds
  bool protected_[kMaxExperts] = {};
  int layer_ = -1;        // the layer whose request `is_standin_` holds
  bool is_standin_[kMaxExperts] = {};
  std::vector<int32_t> forward_;  // request()'s experts for inner
  std::vector<int32_t> admit_list_;  // request()'s stand-ins, prefetched from inner (set_admit)
  bool admit_ = false;
  StandInCounters c_;
  bool active_ = true;
  int n_expert_ = 0;              // the most experts of a layer (uses_' row)
  std::vector<uint32_t> uses_;    // [n_layer * n_expert_]: passes that computed the expert from the stand-in
};

}  // namespace strata
