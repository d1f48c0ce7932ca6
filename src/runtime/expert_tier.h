#pragma once
// The memory plan and the expert tier of an engine: dense weights, KV cache and scratch are
// planned first; what is left of --ram-budget becomes the expert cache. When everything fits,
// experts stay resident (views of the mapped file, no streaming); otherwise an ExpertCache
// streams them with O_DIRECT reads.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "experts/expert_cache.h"
#include "experts/expert_store.h"
#include "runtime/background_load.h"
#include "model/model.h"
#include "model/vram_plan.h"

namespace strata {

class VramExperts;

// Resident models: Wait reads the whole file before the first token; Background decodes at once
// through a small expert cache while a thread reads the file, then switches to resident (only
// when most of the file is not in memory yet); AlwaysBackground does so even then (tests).
enum class LoadMode : uint8_t { Wait, Background, AlwaysBackground };

struct TierOptions {
  uint64_t ram_budget = 0;        // 0: no budget (resident experts)
  int64_t cache_experts = 0;      // > 0: cap the cache at this many experts (forces streaming)
  std::string policy = "default";
  int lookahead = 1;              // MoE layers ahead whose experts are prefetched
  int queue_depth = 64;
  bool force_pread = false;
  bool mlock = false;
  FaultPlan faults;               // tests: inject read failures (pread backend)
  // --model-copy: byte-identical copies of the file on other drives (checked at start); expert
  // reads go to the drive with the fewest bytes in flight (experts/io_backend.h).
  std::vector<std::string> model_copies;
  // Warm start (streaming only): fill the cache at start with the experts earlier runs routed to
  // most, from stats_dir (empty: default_stats_dir()), and add this run's counts there at the end.
  bool warm_start = false;
  std::string stats_dir;
  LoadMode load = LoadMode::Wait;
  LoadHooks load_hooks;           // tests: hold or fail the background load
  // Memory that drafting holds beside the model (a draft model's engine, the NextN KV rows),
  // planned like the KV cache: the expert cache gets what is left after it.
  uint64_t draft_bytes = 0;
  // --numa shard: the share (0..1] of the expert cache this tier takes; the rest of what the budget
  // leaves for experts (MemoryPlan::experts_budget) goes to the other nodes' shards.
  double cache_share = 1.0;
  // Logits rows the engine's callers hold (EngineOptions::logit_rows, n_vocab floats each).
  uint64_t logits_bytes = 0;
  // The vocabulary's tables beside the model: the tokenizer's, and the grammar index when
  // constrained decoding is served (heap bytes measured as they were built).
  uint64_t vocab_bytes = 0;
  // Request handling (the server): each slot's n_vocab sampling buffers, the request memory the
  // HTTP front admits bodies and their handling against, the HTTP threads' stacks.
  uint64_t request_bytes = 0;
  // An expert-parallel shard server (EngineOptions::routed_only): the plan has no dense weights,
  // and they are neither copied into process memory nor read into the page cache (the mapping
  // stays untouched; resident experts fault in as jobs use them).
  bool routed_only = false;
};

// Planned for the binary, the heap outside the planned buffers, and thread stacks.
inline constexpr uint64_t kProcessAllowance = 24ull << 20;

struct MemoryPlan {
  uint64_t budget = 0;
  uint64_t dense = 0, kv = 0, scratch = 0;
  uint64_t draft = 0;             // TierOptions::draft_bytes (a draft model, NextN KV rows)
  uint64_t logits = 0;            // TierOptions::logits_bytes
  uint64_t vocab = 0;             // TierOptions::vocab_bytes
  uint64_t requests = 0;          // TierOptions::request_bytes (an expert shard: its job and answer buffers)
  uint64_t experts_total = 0;     // routed expert bytes in the file
  uint64_t expert_cache = 0;      // bytes given to the expert cache (0 when resident)
  uint64_t experts_budget = 0;    // streaming: what the budget leaves for expert caches (all --numa nodes together)
  int64_t cache_slots = 0;
  int size_classes = 1;           // distinct expert slot sizes (each class has its own slots)
  int64_t experts = 0;
  bool streaming = false;
  bool routed_only = false;       // TierOptions::routed_only: an expert-parallel shard server's plan
  double warm_s = 0;              // resident: seconds spent reading the file into the page cache at load
  uint64_t dense_copied = 0;      // streaming: dense bytes moved from the file mapping into process memory
  double dense_copy_s = 0;
  std::string io;                 // backend description
  int64_t warm_queued = 0;        // warm start: experts ranked by earlier runs, queued for the cache
  std::string warm_note;          // warm start: why no statistics were used (missing, corrupt...)
  bool loading = false;           // resident model, still being read in the background (streaming meanwhile)
  bool loaded_in_background = false;  // it was, and the tier switched to resident
  double load_s = 0;              // seconds the background load took
  std::string load_error;         // the background load failed: streaming stays on
  VramPlan vram;                  // the device side (--gpu): which layers, weights / KV / scratch in VRAM (ExpertTier::set_vram)
  // Everything planned but the expert cache, and with it.
  uint64_t fixed() const { return dense + kv + scratch + draft + logits + vocab + requests; }
  uint64_t total() const { return fixed() + expert_cache; }
  std::string describe() const;
};

class ExpertTier {
 public:
  // Plans memory for `model` with a KV cache (and per-sequence state) of kv_bytes and a forward
  // pass scratch of scratch_bytes, both as allocated (KvCache::bytes(), Model::scratch_bytes());
  // throws when the dense part alone does not fit the budget. Installs the provider in the model.
  ExpertTier(Model& model, uint64_t kv_bytes, uint64_t scratch_bytes, const TierOptions& opt);
  ~ExpertTier();

  // The plan as the engine thread sees it (only that thread may call this while it runs passes).
  const MemoryPlan& plan() const { return plan_; }
  // A copy for other threads (the server's /props, /stats): poll_load() changes the plan between
  // passes under the same lock.
  MemoryPlan plan_snapshot() const {
    std::lock_guard<std::mutex> lk(plan_mu_);
    return plan_;
  }
  // The expert cache while experts stream; nullptr when resident. A background load that ends
  // drops it at the start of a pass (poll_load), so do not hold this pointer across
  // Engine::forward: use counters() for figures that span passes.
  ExpertCache* cache() { return cache_.get(); }
  // Warm start of a VRAM expert cache (model/vram_experts.h) above a streaming RAM tier: the
  // experts earlier runs used most that its layers hold go up first, read from the file's mapping
  // (whose pages are released after), and the RAM tier leaves them to it (exclusive tiers: its fill
  // skips them, copies it read already are given up). Returns how many went up (0 when not streaming
  // or without statistics).
  int warm_vram(VramExperts& vram);
  // The expert cache's counters; after a background load switched to resident, those it had at the
  // switch (they stop there). Zero for a model resident from the start.
  ExpertCacheCounters counters() const { return cache_ ? cache_->counters() : retired_; }
  const ExpertStore& store() const { return *store_; }
  const Model& model() const { return model_; }
  // What speculation asks of the expert cache, through the tier (resident: nothing read, nothing to
  // demote): the bytes the latest pass read for an expert; experts it read go to the low-priority end.
  bool streaming() const { return cache_ != nullptr; }
  uint64_t batch_read_bytes(ExpertKey k) const { return cache_ ? cache_->batch_read_bytes(k) : 0; }
  int demote_fresh(std::span<const ExpertKey> keys) { return cache_ ? cache_->demote_fresh(keys) : 0; }
  // Warm start: adds this run's routing counts to the statistics file now (also done at
  // destruction). Returns false (and warns) when the file cannot be written.
  bool save_warm_stats();
  // Background load: when the load has ended, switches to resident (drops the expert cache) or,
  // after a read error, records it and keeps streaming. Cheap; the engine calls it before each
  // pass. Returns whether it switched now.
  bool poll_load();
  uint64_t load_bytes_done() const { return loader_ ? loader_->bytes_done() : 0; }
  // Memory the plan had for drafting (MemoryPlan::draft) was freed: `bytes` of it go to the expert
  // cache while experts stream (ExpertCache::grow). Returns the bytes the cache gained.
  uint64_t give_to_cache(uint64_t bytes);
  // The VRAM side of the plan, once a device executor holds the model's leading layers.
  void set_vram(const VramPlan& v) {
    std::lock_guard<std::mutex> lk(plan_mu_);
    plan_.vram = v;
  }

 private:
  void warm_resident(Model& model);
  void start_warm(const TierOptions& opt);
  void go_resident(const TierOptions& opt);
  void start_background_load(const TierOptions& opt);
  std::unique_ptr<IoBackend> make_backend(const TierOptions& opt);
  std::unique_ptr<BackgroundLoad> loader_;
  ExpertCacheCounters retired_;  // the dropped cache's counters (background load ended)
  std::string warm_path_;
  std::vector<ExpertKey> warm_order_;  // the statistics' ranking (start_warm), for warm_vram
  uint64_t model_key_ = 0;
  bool warm_saved_ = false;
  Model& model_;
  MemoryPlan plan_;
  mutable std::mutex plan_mu_;  // plan_ changes after construction (poll_load) vs plan_snapshot()
  std::unique_ptr<ExpertStore> store_;
  std::unique_ptr<ExpertCache> cache_;
};

// Per part of the model's file: the ranges of everything but routed experts, merged ([begin, end),
// sorted; small gaps ride along).
std::vector<std::vector<std::pair<uint64_t, uint64_t>>> dense_ranges(const Model& model);

// bytes * share, rounded down (share in (0, 1]; throws otherwise): a --numa node's part of the
// expert budget.
uint64_t share_of(uint64_t bytes, double share);

// Peak resident set of this process (VmHWM) and current (VmRSS), bytes.
uint64_t process_peak_rss();
uint64_t process_rss();
// Bytes the allocator has handed out and not had back (glibc mallinfo2: uordblks + hblkhd): the
// difference across a build measures what the built tables hold.
uint64_t heap_in_use();

}  // namespace strata
