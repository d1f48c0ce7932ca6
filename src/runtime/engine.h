#pragma once
// The engine facade used by the CLI and the server: a model, its KV cache, a thread pool,
// and evaluation of token runs per sequence (prompts in chunks, then one token per step).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/thread_pool.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "runtime/expert_tier.h"

namespace strata {

struct EngineOptions {
  int n_ctx = 4096;                 // positions per sequence (0: the model's training context)
  int n_seq = 1;                    // sequence slots
  int n_threads = 0;                // 0: all hardware threads
  int n_batch = 512;                // prompt tokens per forward call
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
  TierOptions tier;                 // --ram-budget, --cache-experts, prefetch, I/O
};

class Engine {
 public:
  Engine(std::unique_ptr<Model> model, const EngineOptions& opt);

  Model& model() { return *model_; }
  const ModelConfig& config() const { return model_->config(); }
  KvCache& kv() { return *kv_; }
  ThreadPool& pool() { return *pool_; }
  const EngineOptions& options() const { return opt_; }
  ExpertTier& tier() { return *tier_; }

  // Evaluates tokens [n] of sequence `seq` at positions pos0..pos0+n-1 in chunks of n_batch.
  // logits receives n_vocab floats per token when all_logits, else only the last token's.
  void eval(int seq, const int32_t* tokens, int n, int pos0, bool all_logits, std::vector<float>& logits);

 private:
  std::unique_ptr<Model> model_;
  EngineOptions opt_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<ExpertTier> tier_;
  std::vector<int32_t> pos_, seq_;
  std::vector<uint8_t> want_;
};

// Monotonic wall clock in seconds: the one clock of core/clock.h.
inline double now_s() { return clock_s(); }

}  // namespace strata
