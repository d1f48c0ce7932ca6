#pragma once
// The engine: the one front door of the CLI and the server. It owns the model, its KV cache,
// the thread pool, the expert tier and the sequence slots, and it is the one place that builds
// batches: every forward pass, whether one prompt in chunks or many slots decoding together,
// goes through Engine::forward, which also keeps each slot's record of which KV rows it holds
// and which of them a later prompt may reuse.
#include <climits>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
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
  int n_batch = 512;                // most tokens in one forward pass (the scratch is planned for it)
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
  TierOptions tier;                 // --ram-budget, --cache-experts, prefetch, I/O
  // MTP drafting: a NextN KV cache (block 0's one layer, n_ctx positions) per slot, allocated
  // with the slots' KV cache and counted in the memory plan (MemoryPlan::draft). Ignored when
  // the file has no NextN block.
  bool nextn_kv = false;
  // The server's MTP drafter: its copy of each pass's hidden rows (PassHiddenCopy, n_batch rows)
  // is counted in the memory plan too (MemoryPlan::draft).
  bool nextn_hidden_copy = false;
  // Speculation with predicted routing (runtime/routing_memory.h): each slot's routing by position
  // is counted in the memory plan too (MemoryPlan::draft).
  bool routing_memory = false;
  // Every pass's logits are checked to be finite (one scan of the rows asked for); a NaN or Inf
  // is an error naming the first intermediate tensor, in order, that was not finite (found by
  // running the pass again with a tensor observer). Off: whatever the arithmetic gives.
  bool check_finite = true;
  // The most logits rows one forward() returns (Logits::Last counts 1, Logits::All n): the caller's
  // buffer for them and eval_rows' pass buffer are planned (MemoryPlan::logits), and a pass asking
  // more is refused. 0: n_batch (any pass). Speculative verification asks 1 + drafts per slot; the
  // CLI's commands and the server set what they ask.
  int logit_rows = 0;
  // Expert parallelism's shard server (a rank other than 0, runtime/expert_parallel.h): only what
  // Model::run_routed and the expert tier need. No KV cache (one of no layers), scratch for routed
  // jobs of n_batch tokens, no logits rows, and a memory plan without dense weights (they stay in
  // the file's mapping, untouched), so the expert cache gets what they and the KV cache would take.
  // forward / eval / eval_rows refuse.
  bool routed_only = false;
};

// No NaN and no Inf in v (EngineOptions::check_finite).
bool all_finite(const float* v, size_t n);
inline bool all_finite(const std::vector<float>& v) { return all_finite(v.data(), v.size()); }

// Which logits rows an input asks for.
enum class Logits : uint8_t { None, Last, All };

// One sequence's part of a forward pass: n tokens appended at the end of the slot's sequence.
struct SeqInput {
  int seq = 0;
  const int32_t* tokens = nullptr;
  int n = 0;
  Logits logits = Logits::Last;
  // Every row computed with the arithmetic of a lone decoding token (attention summed in the decode
  // order, f32 products through the dot): the logits of row i are then bit for bit those plain
  // decoding gives for tokens[i]. Speculative verification sets it; these rows are not reusable.
  bool decode_order = false;
};

class Engine;

// Told after every pass that succeeded, once the slots' records are updated (the MTP draft source
// keeps its NextN rows in step with the trunk this way). Engine::hidden_row gives the rows of the
// pass during the call.
class PassListener {
 public:
  virtual ~PassListener() = default;
  virtual void on_pass(Engine& eng, std::span<const SeqInput> inputs) = 0;
};

class Engine {
 public:
  Engine(std::unique_ptr<Model> model, const EngineOptions& opt);

  Model& model() { return *model_; }
  const ModelConfig& config() const { return model_->config(); }
  ThreadPool& pool() { return *pool_; }
  const KvCache& kv() const { return *kv_; }
  KvCache& kv() { return *kv_; }  // slot files (runtime/slot_file.h) write rows into it
  const EngineOptions& options() const { return opt_; }
  ExpertTier& tier() { return *tier_; }
  const ExpertTier& tier() const { return *tier_; }
  int n_seq() const { return opt_.n_seq; }
  // Slot `seq`'s NextN KV rows (EngineOptions::nextn_kv); nullptr without them.
  KvCache* nextn_kv(int seq) { return nextn_kv_.empty() ? nullptr : nextn_kv_[static_cast<size_t>(seq)].get(); }

  // ---- sequence slots ----------------------------------------------------------------------
  // Tokens whose KV rows slot `seq` holds (positions 0..length-1).
  int seq_length(int seq) const;
  // Drops the rows of `seq` from position n on (n <= seq_length). Architectures whose per-sequence
  // state is more than KV rows (DeepSeek-V4's compressed blocks) can only drop everything.
  void truncate(int seq, int n);
  void reset(int seq) { truncate(seq, 0); }
  // How many leading tokens of `prompt` can keep the rows slot `seq` holds, such that the run gives
  // exactly what a fresh run would: rows computed in multi-token passes only (a lone token of its
  // sequence in a pass sums attention in another order), at least two prompt tokens left to
  // evaluate (one multi-token chunk whose last row gives the logits), 0 where rows cannot be
  // rewound. Prefix reuse is this rule and nothing else.
  int reusable_prefix(int seq, std::span<const int32_t> prompt) const;
  // The tokens whose rows slot `seq` holds, by position.
  std::span<const int32_t> seq_tokens(int seq) const { return seq_at(seq).tokens; }
  // Rows of `seq` that a later prompt could reuse (what a slot has to lose).
  int reusable_rows(int seq) const;
  // Leading rows of `seq` computed in multi-token passes (the run the reuse rule reads).
  int chunked_rows(int seq) const { return seq_at(seq).n_chunked; }
  // Slot files (runtime/slot_file.h): the rows of `seq` were just written into the cache; its
  // record becomes `tokens` (positions 0..n-1), of which the first n_chunked came from multi-token
  // passes, exactly as in the engine that saved them.
  void adopt_rows(int seq, std::span<const int32_t> tokens, int n_chunked);
  // Starts a prompt in `seq`: keeps reusable_prefix() rows (at most max_keep), drops the rest;
  // returns how many rows were kept.
  int start_prompt(int seq, std::span<const int32_t> prompt, int max_keep = INT32_MAX);
  // Tokens of a prompt with `rest` tokens left to take into a pass that has room for `room`: as many
  // as fit, but never leaving one token behind, and never a lone token of a longer prompt (both would be
  // a lone-token pass, computed in another order than a fresh run). 0: wait for a pass with more room.
  static int prompt_chunk(int rest, int room);

  // ---- forward passes ----------------------------------------------------------------------
  // One forward pass over several sequences (one input per sequence, at most n_batch tokens in all).
  // Logits rows are written in input order: one for Logits::Last, n for Logits::All. On an error the
  // rows of every sequence in the pass are in an unknown state: those slots are reset, and the error
  // is rethrown for the caller to fail exactly the requests of those sequences.
  void forward(std::span<const SeqInput> inputs, std::vector<float>& logits);
  // One sequence: truncates it to pos0 and evaluates tokens[n] in passes of at most n_batch tokens
  // (split by prompt_chunk). logits: n rows of n_vocab when all_logits, else the last token's row.
  // The caller's buffer holds n rows when all_logits (outside the memory plan: use eval_rows for
  // long inputs under a budget).
  void eval(int seq, const int32_t* tokens, int n, int pos0, bool all_logits, std::vector<float>& logits);
  // Like eval, but hands the logits of rows first..n-1 to `sink` in order (a view valid during the
  // call) pass by pass, holding at most EngineOptions::logit_rows of them: passes that give rows are
  // cut to that many tokens (at least two, never a lone token). Perplexity scores a window so.
  using RowSink = std::function<void(int i, const float* row)>;
  void eval_rows(int seq, const int32_t* tokens, int n, int pos0, int first, const RowSink& sink);
  // The trunk's final hidden state [n_embd] (before the output norm) at position `pos` of `seq`
  // when the last pass computed that row and the model ran nothing since; nullptr otherwise. A view
  // of the model's scratch (no copy), valid until the next pass.
  const float* hidden_row(int seq, int pos) const;
  // Pass listeners, told after every pass that succeeded in the order they were added.
  void add_pass_listener(PassListener* l) {
    if (l && !has_pass_listener(l)) listeners_.push_back(l);
  }
  void remove_pass_listener(const PassListener* l) { std::erase(listeners_, l); }
  bool has_pass_listener(const PassListener* l) const { return std::find(listeners_.begin(), listeners_.end(), l) != listeners_.end(); }
  size_t pass_listeners() const { return listeners_.size(); }

 private:
  struct Seq {
    std::vector<int32_t> tokens;  // the tokens whose rows are in the cache, by position
    int n_chunked = 0;            // leading rows all computed in multi-token passes
  };
  void start_routed_only(KvCacheOptions ko);
  Seq& seq_at(int seq);
  const Seq& seq_at(int seq) const;
  // Rows of logits the inputs ask for; throws past `cap` (0: no cap).
  size_t check_inputs(std::span<const SeqInput> inputs, size_t cap) const;
  // One pass writing its rows to out (check_inputs' count of rows, n_vocab each).
  void pass(std::span<const SeqInput> inputs, float* out, size_t rows);
  // check_finite: what was not finite in pass b (runs it again; engine_finite.cpp).
  std::string non_finite_report(const Batch& b);

  std::unique_ptr<Model> model_;
  EngineOptions opt_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<KvCache> kv_;
  std::vector<std::unique_ptr<KvCache>> nextn_kv_;  // [n_seq] or empty
  std::unique_ptr<ExpertTier> tier_;
  std::vector<Seq> seqs_;
  // Batch buffers, reused across passes.
  std::vector<int32_t> tokens_, pos_, seq_;
  std::vector<uint8_t> want_, solo_;
  std::vector<float> part_;  // eval / eval_rows: logits of one pass (logit_rows rows, planned)
  struct PassRows {
    int seq = 0, pos0 = 0, n = 0, row0 = 0;  // positions [pos0, pos0 + n) of seq are batch rows [row0, row0 + n)
  };
  std::vector<PassRows> last_;  // the last pass (empty: none, or it failed)
  std::vector<PassListener*> listeners_;
};

// Wall clock in seconds (the one clock, core/clock.h).
inline double now_s() { return clock_s(); }

}  // namespace strata
