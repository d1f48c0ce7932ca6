#pragma once
// A loaded model: config (one LayerConfig per layer), bound weights, and the forward pass
// over a batch of tokens (any mix of sequences and positions) against a KV cache.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "experts/expert_provider.h"
#include "gguf/gguf_file.h"
#include "kernels/kernel_table.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/route_cache.h"
#include "model/weights.h"

namespace strata {

class ThreadPool;

struct Batch {
  int n = 0;
  const int32_t* tokens = nullptr;  // [n]
  const int32_t* pos = nullptr;     // [n] position within its sequence
  const int32_t* seq = nullptr;     // [n] KV-cache sequence slot (nullptr: all 0)
  const uint8_t* logits = nullptr;  // [n] 1 = output logits for this token (nullptr: last token only)
  // [n] 1 = compute this row exactly as a lone token of its sequence (a decode step) would be
  // computed (speculative verification: each row gives the bits plain decoding would); nullptr: none.
  const uint8_t* solo = nullptr;
};

// Per-MoE-layer routing of one batch (for stats, traces and the expert tier).
struct RoutingObserver {
  virtual ~RoutingObserver() = default;
  // token i of the batch selected experts ids[0..k)
  virtual void on_route(int layer, int token, const int32_t* ids, int k) = 0;
  // The router lookahead predicted ids[0..n) for `layer` (a later MoE layer) from the batch's
  // current hidden state, and asked the expert provider to prefetch them; called after the
  // on_route calls of the layer that predicted.
  virtual void on_predict(int layer, const int32_t* ids, int n) { (void)layer, (void)ids, (void)n; }
};

// Lossy routing, for speed at a measured cost in quality (issue 37; all off by default, and then
// every result is bit-identical). Fewer routed experts per token: at most `k` of the router's
// choices (0: the model's), taken in gate order until their share of the chosen experts' gate mass
// reaches `min_mass` (1: all); at least one. The kept experts' weights are scaled to the chosen
// ones' sum. `route`: cache-conditional routing (model/route_cache.h), applied before the trim.
struct MoeKnobs {
  int k = 0;
  float min_mass = 1.0f;
  RouteCacheOptions route;
  RouteCacheCounters* route_counts = nullptr;  // where route_batch counts (Model::set_moe_knobs sets it)
  bool trims() const { return k > 0 || min_mass < 1.0f; }
  bool active() const { return trims() || route.on(); }
};

// A model's routing observers, in the order they were added: each call reaches every one (its
// users add and remove theirs; nobody chains by hand).
class RoutingObservers final : public RoutingObserver {
 public:
  void add(RoutingObserver* o) {
    if (o && !contains(o)) list_.push_back(o);
  }
  void remove(const RoutingObserver* o) { std::erase(list_, o); }
  bool contains(const RoutingObserver* o) const { return std::find(list_.begin(), list_.end(), o) != list_.end(); }
  bool empty() const { return list_.empty(); }
  void on_route(int layer, int token, const int32_t* ids, int k) override {
    for (RoutingObserver* o : list_) o->on_route(layer, token, ids, k);
  }
  void on_predict(int layer, const int32_t* ids, int n) override {
    for (RoutingObserver* o : list_) o->on_predict(layer, ids, n);
  }

 private:
  std::vector<RoutingObserver*> list_;
};

// Named intermediate tensors of a pass (for parity checks against llama.cpp's eval callback and
// `strata run --dump-tensors`). Names follow llama.cpp's graph callback names where it has one:
// per layer attn_norm, attn_out (attention output before the residual add), ffn_inp (residual
// after attention), ffn_norm, ffn_moe_logits (router logits, biases added), ffn_moe_out (routed
// experts' weighted sum), ffn_out (FFN block output before the residual add, shared experts
// included), l_out (layer output); after the layers result_norm and result_output (layer -1).
// DeepSeek-V4 also reports hc_attn_pre / hc_ffn_pre (sub-block inputs collapsed from the streams),
// has no ffn_inp, and its l_out is the hyper-connection streams [n, n_hc * n_embd] (llama.cpp's
// l_last). Rows are the batch's tokens in batch order (result_*: the rows with logits, in batch
// order); data is row-major [rows, cols] and only valid during the call. No observer: one null
// check per point.
struct TensorObserver {
  virtual ~TensorObserver() = default;
  // Asked before each point; false skips on_tensor.
  virtual bool wants(const char* name, int layer) { return (void)name, (void)layer, true; }
  virtual void on_tensor(const char* name, int layer, const float* data, int rows, int cols) = 0;
};

class Model;
class LayerExecutor;  // model/executor.h
class ExpertOffload;  // model/forward.h
class RoutedWorker;

// Expert parallelism's remote side (Model::run_routed): one MoE layer's routed (token, slot) pairs
// of another process's batch of n tokens that fall on this process's experts.
struct RoutedJob {
  int layer = 0, n = 0;               // the MoE layer; the batch's token count
  int n_tok = 0;                      // token rows sent
  const int32_t* tok = nullptr;       // [n_tok] their batch indices (ascending)
  const float* rows = nullptr;        // [n_tok, n_embd] the FFN's normalized input rows
  int n_pairs = 0;                    // pairs, grouped by expert in ascending order
  const int32_t* pair_tok = nullptr;  // [n_pairs] batch index
  const int32_t* pair_slot = nullptr; // [n_pairs] selection slot (0..k)
  const int32_t* pair_exp = nullptr;  // [n_pairs] expert
  const float* pair_w = nullptr;      // [n_pairs] gate weight
};

// One architecture: reads its config from metadata and binds its weights. run_layers, when
// set, replaces the standard pre-norm residual loop (embedding -> layers): it must leave the
// final hidden state [n, n_embd] in State::x for the output head (DeepSeek-V4's hyper-connections).
struct ArchDef {
  const char* name;
  void (*load_config)(const GgufModel& m, ModelConfig& cfg);
  void (*bind)(const WeightBinder& b, const ModelConfig& cfg, ModelWeights& w);
  void (*run_layers)(struct FwdCtx& c) = nullptr;
  // A sequence's state is its KV rows alone, so it can be cut back to any position and a prompt
  // prefix reused; false when the architecture keeps more per sequence (DeepSeek-V4's compressed blocks).
  bool rewindable = true;
  // Creates the architecture's per-sequence state beside the KV rows (KvCache::ext()) at its full
  // capacity for the cache's n_ctx positions per sequence and passes of n_batch tokens; nullptr: none.
  std::unique_ptr<KvCacheExt> (*make_state)(const ModelConfig& cfg, const KvCache& kv, int n_batch, int n_threads) = nullptr;
};
const ArchDef* find_arch(const std::string& name);

// One pass of a NextN (multi-token prediction) block: row i combines the hidden state h[i] at
// position pos[i] (the trunk's final hidden state there, before the output norm, or a NextN
// output) with the token that follows it, tokens[i], and predicts the token after that. Every row
// writes its K/V row at pos[i] into the NextN block's own KV cache; only the last n_out rows go
// through the FFN and the draft head (a row's K/V depend only on the block's input).
struct NextnBatch {
  int n = 0;
  const int32_t* tokens = nullptr;  // [n] x_{pos+1}
  const int32_t* pos = nullptr;     // [n]
  const float* const* h = nullptr;  // [n] rows of n_embd; may be the model's own hidden rows (read first)
  int n_out = 0;                    // the last n_out rows give logits and output hidden rows
  bool solo = false;                // every row in the decode order (as a lone token)
};
std::vector<std::string> supported_archs();

class Model {
 public:
  // Opens and validates the model; throws strata::Error naming the problem.
  static std::unique_ptr<Model> load(const std::string& path);
  ~Model();

  const ModelConfig& config() const { return cfg_; }
  const GgufModel& gguf() const { return *gguf_; }
  const ModelWeights& weights() const { return w_; }
  bool rewindable() const { return arch_->rewindable; }

  // Runs the batch and writes logits [n_out, n_vocab] for the tokens whose logits flag is set
  // (in batch order). Validates token ids and positions.
  void forward(const Batch& b, KvCache& kv, float* logits);

  // Allocates everything a pass over `kv` of up to n_batch tokens needs (the scratch, the matmul
  // activation buffers, the architecture's state in kv.ext()), so that passes allocate nothing more
  // and the memory plan can count what is really held. The engine calls it once, before planning.
  void prepare(KvCache& kv, int n_batch, int n_threads);
  // The same for a process that only runs run_routed (an expert-parallel shard server): the scratch
  // alone, no architecture state in kv.ext().
  void prepare_routed(KvCache& kv, int n_batch, int n_threads) { prepare_state(*st_, kv, n_batch, n_threads); }
  // NextN blocks the file carries with their weights (GLM-4.5: blk.<n_layer + j>.nextn.*); 0: none.
  int n_nextn() const;
  // A KV cache for NextN block j (its one layer) with the given context and slots.
  std::unique_ptr<KvCache> make_nextn_kv(int j, const KvCacheOptions& opt) const;
  // Runs NextN block j over the batch (positions of sequence slot 0 of `kv`) and writes logits
  // [n_out, n_vocab] (shared_head_norm / shared_head_head, else the model's output norm and head).
  // Its routed experts come from the expert provider as layer n_layer + j. Overwrites the trunk's
  // hidden rows (hidden_row() is nullptr after it).
  void forward_nextn(int j, const NextnBatch& b, KvCache& kv, float* logits);
  // Row r of the last forward()'s batch: the trunk's final hidden state [n_embd] before the output
  // norm; nullptr when r is not in it or a NextN pass ran since. Valid until the next pass.
  const float* hidden_row(int r) const;
  // Output row r (< n_out) of the last forward_nextn(): the NextN block's hidden state before the
  // draft head's norm (depth 2 feeds it back in); nullptr otherwise.
  const float* nextn_hidden_row(int r) const;
  // Bytes the forward pass's scratch holds (capacities; KvCache::bytes() counts the rest).
  uint64_t scratch_bytes() const;

  void set_threads(ThreadPool* pool) { pool_ = pool; }
  // Routed experts come from here (default: resident views of the mapped file).
  void set_expert_provider(ExpertProvider* p) { experts_ = p ? p : default_experts_.get(); }
  ExpertProvider* expert_provider() const { return experts_; }
  // Routing observers (RoutingObservers): added ones see every pass until removed.
  void add_routing_observer(RoutingObserver* o) { observers_.add(o); }
  void remove_routing_observer(const RoutingObserver* o) { observers_.remove(o); }
  bool has_routing_observer(const RoutingObserver* o) const { return observers_.contains(o); }
  // Named intermediate tensors of every pass go here (nullptr: none, the default).
  void set_tensor_observer(TensorObserver* o) { tensors_ = o; }
  TensorObserver* tensor_observer() const { return tensors_; }
  void set_lookahead(int d) { lookahead_ = d; }
  // Routed experts some of which are computed elsewhere (model/forward.h; nullptr: all here).
  void set_offload(ExpertOffload* o) { offload_ = o; }
  const ExpertOffload* offload() const { return offload_; }
  // Computes job's pairs with this process's expert provider as forward() computes them, and writes
  // each pair's weighted row (its slot of the layer's sum) to out [n_pairs, n_embd]. kv: the engine's
  // cache (untouched; the pass context needs one).
  void run_routed(const RoutedJob& job, KvCache& kv, float* out);
  // The same on another thread while this model's passes run: with w's own scratch, thread pool and
  // expert provider (a NUMA node's shard: runtime/numa_shards.h).
  void run_routed(const RoutedJob& job, KvCache& kv, float* out, RoutedWorker& w);
  // A worker for run_routed with scratch for jobs of up to n_batch tokens (allocated now).
  std::unique_ptr<RoutedWorker> make_routed_worker(KvCache& kv, int n_batch, ThreadPool* pool, ExpertProvider* experts) const;
  // MoeKnobs (validated by the caller against the model's k).
  void set_moe_knobs(const MoeKnobs& m) {
    moe_knobs_ = m;
    moe_knobs_.route_counts = &route_counts_;
  }
  const MoeKnobs& moe_knobs() const { return moe_knobs_; }
  // What --route-cache did since load (zeros when it is off).
  const RouteCacheCounters& route_counters() const { return route_counts_; }
  // Seconds spent in each layer since the last reset (attention + FFN, I/O waits included).
  const std::vector<double>& layer_seconds() const { return layer_s_; }
  void reset_layer_seconds() { layer_s_.assign(cfg_.layers.size(), 0.0); }
  int lookahead() const { return lookahead_; }
  // Rows that went through the output head since load (a pass computes only the rows asked for).
  uint64_t head_rows() const { return head_rows_; }

  struct State;  // scratch buffers (model.cpp)

  // The device that runs the layers (model/executor.h); null: the CPU (the default).
  void set_executor(std::unique_ptr<LayerExecutor> e);
  const LayerExecutor* executor() const { return exec_.get(); }
  LayerExecutor* executor() { return exec_.get(); }

 private:
  void run_layers(struct FwdCtx& c);
  void run_routed_on(const RoutedJob& j, KvCache& kv, float* out, State& st, ThreadPool* pool, ExpertProvider* experts, int& last_layer);
  void prepare_state(State& st, KvCache& kv, int n_batch, int n_threads) const;
  Model() = default;
  std::unique_ptr<GgufModel> gguf_;
  ModelConfig cfg_;
  ModelWeights w_;
  const ArchDef* arch_ = nullptr;
  ThreadPool* pool_ = nullptr;
  std::unique_ptr<ExpertProvider> default_experts_;
  ExpertProvider* experts_ = nullptr;
  RoutingObservers observers_;
  TensorObserver* tensors_ = nullptr;
  int lookahead_ = 0;
  ExpertOffload* offload_ = nullptr;
  int routed_last_layer_ = -1;  // run_routed: a layer not above the last one starts a new batch
  MoeKnobs moe_knobs_;
  RouteCacheCounters route_counts_;
  std::vector<double> layer_s_;
  uint64_t head_rows_ = 0;
  std::unique_ptr<State> st_;
  std::unique_ptr<LayerExecutor> exec_;
  int hidden_rows_ = 0;   // trunk hidden rows in the scratch (last forward)
  int nextn_rows_ = 0;    // NextN output rows in the scratch (last forward_nextn)
  // Per NextN block: a one-layer configuration and weights the shared blocks run (empty when the
  // file has no weights for it).
  std::vector<ModelConfig> nextn_cfg_;
  std::vector<ModelWeights> nextn_w_;
  void setup_nextn();
  void nextn_input(int j, const NextnBatch& b);
  void nextn_head(int j, int m, float* logits);
};

// Model::run_routed's side of its own: scratch, thread pool and expert provider.
class RoutedWorker {
 public:
  ~RoutedWorker();
  uint64_t scratch_bytes() const;

 private:
  friend class Model;
  RoutedWorker() = default;
  std::unique_ptr<Model::State> st_;
  ThreadPool* pool_ = nullptr;
  ExpertProvider* experts_ = nullptr;
  int last_layer_ = -1;  // a layer not above the last one starts a new batch
};

// Resident experts: views into the mapped GGUF (location by formula).
class MappedExperts : public ExpertProvider {
 public:
  explicit MappedExperts(const ModelWeights& w) : w_(w) {}
  void request(int, const int32_t*, int) override {}
  ExpertMats acquire(int layer, int e) override;  // layers n_layer.. are the NextN blocks'
  void release(int, int) override {}

 private:
  const ModelWeights& w_;
};

}  // namespace strata
