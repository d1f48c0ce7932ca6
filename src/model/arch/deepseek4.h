#pragma once
// DeepSeek-V4 internals shared by the deepseek4_*.cpp files: the per-cache state (compressed
// KV blocks and indexer keys per layer and sequence, grown per block), hyper-connection
// helpers and the attention block.
#include <vector>

#include "model/forward.h"

namespace strata::arch {

constexpr int kDsv4MaxHc = 8;  // hyper-connection streams supported
constexpr int kDsv4MaxCompressRatio = 128;  // the largest of the supported compress ratios (0, 4, 128)

void deepseek4_run_layers(FwdCtx& c);

// ---- KV compression state -------------------------------------------------------------------

// One compressor of one layer and sequence. Tokens' (value, score) features wait in a ring
// until their block completes; completed blocks are normalized, roped and appended.
struct Dsv4Compressor {
  int ratio = 0;                // tokens per block (4: overlapping halves, 128: plain)
  int width = 0;                // features per token (2*head for ratio 4, head otherwise)
  int head = 0;                 // values per block
  std::vector<float> ring_kv;   // [ring, width] ring = 2*ratio (ratio 4) or ratio
  std::vector<float> ring_sc;   // [ring, width] scores (ape added)
  std::vector<float> blocks;    // [n_blocks, head]
  int ring() const { return ratio == 4 ? 2 * ratio : ratio; }
  const float* block(int b) const { return blocks.data() + static_cast<size_t>(b) * head; }
};

struct Dsv4LayerState {
  Dsv4Compressor comp;  // attention blocks (ratio 4 / 128)
  Dsv4Compressor idx;   // lightning indexer keys (ratio 4)
};

// Scratch of the deepseek4 forward (grown with the batch, reused).
struct Dsv4Scratch {
  std::vector<float> streams, streams_new;  // [n, n_hc, n_embd]
  std::vector<float> flat;                  // [n, n_hc * n_embd] normalized concat
  std::vector<float> mix;                   // [n, n_mix]
  std::vector<float> pre, post, comb;       // [n, n_hc], [n, n_hc], [n, n_hc*n_hc] (dst + n_hc*src)
  std::vector<float> qr;                    // [n, q_lora]
  std::vector<float> ckv, csc;              // [n, width] compressor features
  std::vector<float> iq;                    // [n, idx_heads * idx_dim]
  std::vector<float> iw;                    // [n, idx_heads]
  std::vector<int32_t> isel;                // [n, top_k] chosen blocks
  std::vector<int32_t> n_isel;              // [n]
  std::vector<float> iscore;                // [blocks] indexer scores of one query
  std::vector<int32_t> iorder;              // [blocks] their order
  std::vector<float> grp_in, grp_out, grp_cat;  // grouped output projection
  std::vector<std::vector<const float*>> thread_keys;  // per thread: visible keys of one query
  std::vector<std::vector<int32_t>> thread_cells;      // per thread: their cells in llama.cpp's view
  std::vector<std::vector<float>> thread;   // per thread: scores + rows
};

// Lives in KvCache::ext(): per layer and sequence slot.
struct Dsv4Cache : KvCacheExt {
  std::vector<std::vector<Dsv4LayerState>> layers;  // [n_layer][n_seq]
  Dsv4Scratch scratch;
  uint64_t bytes() const override;
};
// ArchDef::make_state: the compressors of every layer and sequence with room for n_ctx positions,
// and the scratch for passes of n_batch tokens on n_threads threads.
std::unique_ptr<KvCacheExt> deepseek4_make_state(const ModelConfig& cfg, const KvCache& kv, int n_batch, int n_threads);
// The cache's deepseek4 state (Model::prepare made it).
Dsv4Cache& dsv4_cache(FwdCtx& c);

// ---- Hyper-connections ----------------------------------------------------------------------

// pre/post/comb of every token for one sub-block from the streams [n, n_hc, n_embd].
void hc_prepare(FwdCtx& c, Dsv4Scratch& s, const HcWeights& w, int n);
// out[i] = sum_k pre[i,k] * streams[i,k]   (the sub-block input, [n, n_embd])
void hc_collapse(FwdCtx& c, const Dsv4Scratch& s, int n, float* out);
// streams[i,dst] = post[i,dst] * f[i] + sum_src comb[i](dst,src) * streams[i,src]
void hc_expand(FwdCtx& c, Dsv4Scratch& s, const float* f, int n);
// Output read-out: out[i] = sum_k (sigmoid(mix*scale + base) + eps)_k * streams[i,k]
void hc_readout(FwdCtx& c, Dsv4Scratch& s, const HcWeights& w, int n, float* out);

// ---- Attention ------------------------------------------------------------------------------

// Reads st.xn = attn_norm(input) [n, n_embd], writes st.out [n, n_embd]; updates the compressors.
void dsv4_attention(FwdCtx& c, Dsv4Cache& cache, int layer);

}  // namespace strata::arch
