#pragma once
// Internals of the forward pass shared by model.cpp, attention.cpp and ffn.cpp.
#include <algorithm>
#include <atomic>
#include <vector>

#include "core/limits.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/model.h"

namespace strata {

// Scratch buffers sized for the largest batch seen; grown outside the per-token hot path.
struct Model::State {
  int cap = 0;                   // batch capacity (tokens)
  int ctx_cap = 0;               // positions per thread buffer
  std::vector<float> x;          // [n, n_embd] residual stream
  std::vector<float> xn;         // [n, n_embd] normalized input of a sub-block
  std::vector<float> q, k, v;    // [n, n_head * head_dim] projections
  std::vector<float> attn;       // [n, n_head * head_dim_v] attention output (pre-projection)
  std::vector<float> tmp;        // [n, max(widths)] general purpose
  std::vector<float> out;        // [n, n_embd] sub-block output
  std::vector<float> rope_cs;    // [n, max_rope_dims] (cos, sin) per token
  // MoE
  std::vector<float> router;     // [n, n_expert]
  std::vector<int32_t> sel;      // [n, k] selected experts
  std::vector<float> sel_w;      // [n, k] their weights
  std::vector<float> gather;     // [n, n_embd] inputs of one expert's tokens
  std::vector<float> gate, up;   // [n, n_ff]
  std::vector<float> slots;      // [n, k, n_embd] per-slot expert outputs
  std::vector<int32_t> tok_of;   // [n * k] token of each routed slot, grouped by expert
  std::vector<int32_t> slot_of;  // [n * k]
  std::vector<int32_t> expert_list;  // unique experts of the batch
  std::vector<float> logits_in;  // [n_out, n_embd]
  std::vector<float> nextn_in;   // [n, 2 * n_embd] NextN input [enorm(embed(x_{t+1})) | hnorm(h_t)] (GLM files with a NextN block)
  // A group of small experts computed together (decoding): kGroupMaxRows token rows.
  std::vector<float> grp_x, grp_y;  // [rows, n_embd]
  std::vector<float> grp_g, grp_u;  // [rows, n_ff]
  MatmulManyScratch mm_many;
  // Prompt-size MoE batches (ffn.cpp, ExpertRun::run_wave): many experts' products in one
  // thread-pool pass per matrix kind, on up to wave_rows (token, slot) rows.
  int wave_rows = 0;
  std::vector<uint8_t> wave_xq;       // [n, act row] st.xn's rows quantized once for gate/up
  std::vector<uint8_t> wave_ax;       // [wave_rows, act row] those rows gathered per expert
  std::vector<uint8_t> wave_ag;       // [wave_rows, act row] GLU outputs quantized for down
  std::vector<float> wave_g, wave_u;  // [wave_rows, n_ff]
  std::vector<float> wave_y;          // [wave_rows, n_embd]
  // [n] 1 = the only token of its sequence in this batch (a decode step). Attention picks its
  // summation order per token from this, so a sequence's results do not depend on which other
  // sequences share the batch.
  std::vector<uint8_t> solo;
  std::vector<uint8_t> in_gemm;      // [n] 1 - solo: the token is part of a multi-token chunk
  std::vector<uint8_t> in_gemm_out;  // [n_out] the same for the rows of logits_in
  std::vector<int32_t> seq_count;  // [n_seq] tokens per sequence in this batch
  std::vector<std::vector<float>> thread_buf;  // per thread: scores + rows
  MatmulScratch mm;

  void ensure(const ModelConfig& cfg, int n, int n_ctx, int n_threads);
  // Reserves the matmul activation buffers for n tokens of quantized rows up to max_row bytes.
  void reserve_matmul(int n, uint64_t max_row);
  uint64_t bytes() const;  // capacities of every buffer
};

// MoE experts with at most kGroupMaxTokens tokens in a batch are computed in groups of up to
// kGroupMaxExperts experts / kGroupMaxRows token rows (one thread-pool pass per matrix kind).
inline constexpr int kGroupMaxTokens = 4;
inline constexpr int kGroupMaxExperts = 32;
inline constexpr int kGroupMaxRows = 64;
// Batches of more tokens compute their experts in waves of up to kWaveMaxExperts experts /
// kWaveMaxRows (token, slot) rows (all of a layer's experts at once when they are in memory).
inline constexpr int kWaveMaxExperts = 128;
inline constexpr int kWaveMaxRows = 4096;

// (token, slot) pairs of one MoE layer's batch grouped by expert: expert e's pairs are
// st.tok_of/st.slot_of[starts[e] .. starts[e] + counts[e]).
struct ExpertGroups {
  int counts[kMaxExperts] = {};
  int starts[kMaxExperts + 1] = {};
};

struct FwdCtx;

// Routed experts computed somewhere other than this thread's CPU path (a device's VRAM expert
// cache; another process's shard): per MoE layer, once the router has chosen and the pairs are
// grouped, claim() marks the experts it computes and starts them without waiting; they are not
// requested from the expert provider (nor prefetched for later layers while it holds them). The
// CPU computes the others; then finish() waits for the claimed ones and writes each of their
// (token, slot) rows, weighted by st.sel_w, into st.slots. The slots are summed in selection order
// as always, so the output does not depend on which side finished first.
class ExpertOffload {
 public:
  virtual ~ExpertOffload() = default;
  // away [n_expert] (all kLocal on entry): kAway for the experts it computes, kAwayCopy for those it
  // computes from a copy the provider keeps too (an inclusive tier): they are requested, acquired
  // and released as usual, so the provider sees the use and keeps (or reads) its copy.
  static constexpr uint8_t kLocal = 0, kAway = 1, kAwayCopy = 2;
  virtual void claim(FwdCtx& c, int layer, const ExpertGroups& g, uint8_t* away) = 0;
  virtual void finish(FwdCtx& c, int layer, const ExpertGroups& g, const uint8_t* away) = 0;
  // Why it cannot compute any more ("": it can). A pass it failed threw; the later ones throw too.
  virtual std::string lost() const { return {}; }
  // A kAwayCopy expert's bytes, acquired from the provider once the layer's request is made, before
  // its release (a tier that computes the expert from them uploads them now).
  virtual void take(FwdCtx& c, int layer, int e, const ExpertMats& m) { (void)c, (void)layer, (void)e, (void)m; }
  // Whether it would claim expert e of a later layer (then the CPU path does not prefetch it).
  virtual bool holds(int layer, int e) const {
    (void)layer, (void)e;
    return false;
  }
};

struct FwdCtx {
  const ModelConfig& cfg;
  const ModelWeights& w;
  const KernelTable& k;
  ThreadPool* pool;
  Model::State& st;
  KvCache& kv;
  const Batch& b;
  ExpertProvider* experts;
  RoutingObserver* observer;
  int lookahead = 0;  // MoE layers ahead whose experts are predicted and prefetched
  std::vector<double>* layer_s = nullptr;  // [n_layer] seconds per layer (accumulated)
  TensorObserver* tensors = nullptr;        // named intermediate tensors (nullptr: none)
  const MoeKnobs* knobs = nullptr;          // fewer routed experts (nullptr: the model's routing)
  ExpertOffload* offload = nullptr;         // routed experts computed elsewhere (nullptr: all here)

  // Reports a named tensor [rows, cols] to the observer, if any wants it.
  void trace(const char* name, int layer, const float* data, int rows, int cols) {
    if (tensors && tensors->wants(name, layer)) tensors->on_tensor(name, layer, data, rows, cols);
  }

  // Dense product over the batch's tokens, in token order (x: [b.n, cols]).
  void mm(const QMatrix& m, const float* x, int64_t n, float* y) { matmul(k, pool, m, x, n, y, st.mm, st.in_gemm.data()); }
  // Product over rows that are not the batch's tokens in order (one expert's gathered tokens):
  // llama.cpp's mul_mat_id always takes its dot path there.
  void mm_rows(const QMatrix& m, const float* x, int64_t n, float* y) { matmul(k, pool, m, x, n, y, st.mm); }
  int seq(int i) const { return b.seq ? b.seq[i] : 0; }
  bool solo(int i) const { return st.solo[i] != 0; }
  template <typename F>
  void parallel(int64_t n, F&& f) {
    if (pool) pool->parallel_for(n, 1, f);
    else f(int64_t{0}, n, 0);
  }
  // The same for items of uneven cost (a prompt's causal attention: later tokens see more
  // keys): ranges of `grain` items handed out from a counter, so threads finish together.
  template <typename F>
  void parallel_dynamic(int64_t n, int64_t grain, F&& f) {
    if (!pool || pool->size() == 1 || n <= grain) {
      f(int64_t{0}, n, 0);
      return;
    }
    std::atomic<int64_t> next{0};
    pool->run([&](int tid) {
      for (int64_t a; (a = next.fetch_add(grain, std::memory_order_relaxed)) < n;) f(a, std::min(n, a + grain), tid);
    });
  }
};

// Sub-blocks: read st.xn [n, n_embd], write st.out [n, n_embd].
void attention_gqa(FwdCtx& c, int layer);
void attention_mla(FwdCtx& c, int layer);  // check_batch_positions, mla_project, mla_attend (all keys)
void attention_mla_sparse(FwdCtx& c, int layer);  // DeepSeek-V3.2 (model/arch/deepseek32_attn.cpp)
void attention_mla_kvb(FwdCtx& c, int layer);
void delta_net(FwdCtx& c, int layer);  // Gated DeltaNet linear attention (model/delta_net.cpp)
// st.out = layer's attention of st.xn (its kind's function above; model.cpp).
void attention_block(FwdCtx& c, int layer);
void ffn_dense(FwdCtx& c, int layer);
void ffn_moe(FwdCtx& c, int layer);
// The routed half of ffn_moe, for a device executor that computes the router's product and the
// shared experts itself (model/executor.h): st.xn [n, n_embd] the FFN's normalized rows and
// st.router [n, n_expert] the router's product (without its bias) in; selection (any gating),
// the expert tier's requests and prefetch, the experts on the CPU; st.out [n, n_embd] the
// weighted sum of the routed experts (no shared experts) out. st.router is clobbered.
void moe_routed_experts(FwdCtx& c, int layer);
// Routed experts list[0..m) of `layer` over the (token, slot) pairs `g` groups (st.tok_of /
// st.slot_of; rows st.xn, weights st.sel_w), requested from c.experts and computed by the same
// code as moe_routed_experts' CPU path, their weighted rows written into st.slots (expert
// parallelism's remote ranks: runtime/expert_parallel.h).
void routed_experts_for(FwdCtx& c, int layer, const ExpertGroups& g, const int32_t* list, int m);

// The keys each token of a batch attends to under sparse attention (DeepSeek-V3.2's lightning
// indexer): token i sees the count[i] ascending positions at cells + i * stride, or, when
// count[i] < 0, every position up to its own.
struct KeySelection {
  const int32_t* cells = nullptr;  // [n, stride]
  const int32_t* count = nullptr;  // [n]
  int stride = 0;
};
// MLA in two halves, for attention that acts between them. mla_project: queries [n, n_head *
// (nope + rope)] in st.q (with a q latent: its normalized form [n, q_lora] stays in st.tmp), the
// latent + rope key [n, kv_lora + rope] in st.k. mla_attend: cache writes, absorbed queries,
// attention over every causal key (sel nullptr) or the selected ones, v_b, attn_output.
void mla_project(FwdCtx& c, int layer);
void mla_attend(FwdCtx& c, int layer, const KeySelection* sel);

// Every token's position lies in the KV cache's context and its sequence slot exists.
void check_batch_positions(const FwdCtx& c);
RopeParams rope_params(const RopeConfig& r);
void add_bias(float* y, const VecF32& b, int64_t n_rows);

}  // namespace strata
