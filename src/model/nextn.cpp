// NextN / multi-token prediction blocks (GLM-4.5, DeepSeek-V3 layout): the input projection
// u = eh_proj([enorm(embed(x_{t+1})) | hnorm(h_t)]) (embedding first, as the released GLM and
// DeepSeek MTP implementations concatenate), one decoder block run by the shared attention and
// FFN blocks against the NextN block's own KV cache, and the draft head.
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/quants.h"
#include "model/forward.h"

namespace strata {

namespace {

// The NextN block's routed experts are layer n_layer + j of the expert tier; the shared blocks
// run it as layer 0 of a one-layer configuration.
class OffsetExperts final : public ExpertProvider {
 public:
  OffsetExperts(ExpertProvider& p, int off) : p_(p), off_(off) {}
  void request(int l, const int32_t* e, int n) override { p_.request(l + off_, e, n); }
  void prefetch(int l, const int32_t* e, int n) override { p_.prefetch(l + off_, e, n); }
  ExpertMats acquire(int l, int e) override { return p_.acquire(l + off_, e); }
  int acquire_next(int l, const int32_t* pending, int n, ExpertMats* out) override { return p_.acquire_next(l + off_, pending, n, out); }
  bool try_acquire(int l, int e, ExpertMats* out) override { return p_.try_acquire(l + off_, e, out); }
  void release(int l, int e) override { p_.release(l + off_, e); }
  bool in_memory(int l, int e) const override { return p_.in_memory(l + off_, e); }
  void on_abort() override { p_.on_abort(); }
  void begin_batch(int n) override { p_.begin_batch(n); }

 private:
  ExpertProvider& p_;
  int off_;
};

}  // namespace

void Model::setup_nextn() {
  nextn_cfg_.resize(cfg_.nextn.size());
  nextn_w_.resize(cfg_.nextn.size());
  for (size_t j = 0; j < cfg_.nextn.size(); ++j) {
    if (w_.nextn[j].eh_proj.empty()) continue;  // no weights: the block is absent
    STRATA_CHECK(cfg_.nextn[j].attn == AttnKind::Gqa, "{}: NextN block {} has an attention kind the NextN pass does not run", gguf_->path(), j);
    ModelConfig& c = nextn_cfg_[j];
    c.arch = cfg_.arch;
    c.n_vocab = cfg_.n_vocab;
    c.n_embd = cfg_.n_embd;
    c.n_ctx_train = cfg_.n_ctx_train;
    c.rms_eps = cfg_.rms_eps;
    c.layers = {cfg_.nextn[j]};
    c.n_layer = 1;
    ModelWeights& w = nextn_w_[j];
    w.rope_freqs = w_.rope_freqs;
    w.layers = {w_.nextn[j].block};
  }
}

int Model::n_nextn() const {
  int n = 0;
  while (n < static_cast<int>(nextn_cfg_.size()) && !nextn_cfg_[static_cast<size_t>(n)].layers.empty()) ++n;
  return n;
}

std::unique_ptr<KvCache> Model::make_nextn_kv(int j, const KvCacheOptions& opt) const {
  STRATA_CHECK(j >= 0 && j < n_nextn(), "{}: no NextN block {} (the file has {})", gguf_->path(), j, n_nextn());
  return std::make_unique<KvCache>(nextn_cfg_[static_cast<size_t>(j)], opt);
}

const float* Model::hidden_row(int r) const {
  return r >= 0 && r < hidden_rows_ ? st_->x.data() + static_cast<size_t>(r) * cfg_.n_embd : nullptr;
}

const float* Model::nextn_hidden_row(int r) const {
  return r >= 0 && r < nextn_rows_ ? st_->x.data() + static_cast<size_t>(r) * cfg_.n_embd : nullptr;
}

// [enorm(embed(x_{t+1})) | hnorm(h_t)] per row into st.nextn_in [n, 2 * n_embd].
void Model::nextn_input(int j, const NextnBatch& nb) {
  const NextnWeights& nw = w_.nextn[static_cast<size_t>(j)];
  const int d = cfg_.n_embd;
  const QMatrix& embd = nw.embed_tokens.empty() ? w_.tok_embd : nw.embed_tokens;
  for (int i = 0; i < nb.n; ++i) {
    float* r = st_->nextn_in.data() + static_cast<size_t>(i) * 2 * d;
    if (nb.pos[i] == 0) {
      std::fill(r, r + d, 0.0f);  // nothing precedes position 0: its embedding is masked, as vLLM's MTP does
    } else {
      dequantize_row(embd.type, embd.row(nb.tokens[i]), r, d);
      rmsnorm(r, nw.enorm.data, r, d, cfg_.rms_eps);
    }
    rmsnorm(nb.h[i], nw.hnorm.data, r + d, d, cfg_.rms_eps);
  }
}

// The draft head over the first m rows of st.x: logits [m, n_vocab].
void Model::nextn_head(int j, int m, float* logits) {
  const NextnWeights& nw = w_.nextn[static_cast<size_t>(j)];
  State& st = *st_;
  const int d = cfg_.n_embd;
  const VecF32& norm = nw.shared_head_norm.empty() ? w_.output_norm : nw.shared_head_norm;
  const QMatrix& head = nw.shared_head_head.empty() ? w_.output : nw.shared_head_head;
  st.in_gemm_out.resize(static_cast<size_t>(m));
  for (int i = 0; i < m; ++i) {
    rmsnorm(st.x.data() + static_cast<size_t>(i) * d, norm.data, st.logits_in.data() + static_cast<size_t>(i) * d, d, cfg_.rms_eps);
    st.in_gemm_out[static_cast<size_t>(i)] = st.in_gemm[static_cast<size_t>(i)];
  }
  matmul(kernels(), pool_, head, st.logits_in.data(), m, logits, st.mm, st.in_gemm_out.data());
}

void Model::forward_nextn(int j, const NextnBatch& nb, KvCache& kv, float* logits) {
  STRATA_CHECK(j >= 0 && j < n_nextn(), "{}: no NextN block {} (the file has {})", gguf_->path(), j, n_nextn());
  STRATA_CHECK(nb.n > 0 && nb.n_out >= 0 && nb.n_out <= nb.n, "NextN pass of {} rows with {} output rows", nb.n, nb.n_out);
  const ModelConfig& ncfg = nextn_cfg_[static_cast<size_t>(j)];
  const ModelWeights& nw_run = nextn_w_[static_cast<size_t>(j)];
  const NextnWeights& nw = w_.nextn[static_cast<size_t>(j)];
  const int d = cfg_.n_embd, n = nb.n;
  for (int i = 0; i < n; ++i)
    STRATA_CHECK(nb.tokens[i] >= 0 && nb.tokens[i] < cfg_.n_vocab, "NextN: token id {} at row {} is outside the vocabulary (0..{})", nb.tokens[i], i,
                 cfg_.n_vocab - 1);
  const int n_threads = pool_ ? pool_->size() : 1;
  st_->ensure(cfg_, n, kv.n_ctx(), n_threads);
  State& st = *st_;
  nextn_input(j, nb);  // before anything writes st.x: h may point into it
  hidden_rows_ = nextn_rows_ = 0;
  st.solo.assign(static_cast<size_t>(n), nb.solo || n == 1 ? 1 : 0);
  st.in_gemm.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) st.in_gemm[i] = st.solo[i] ? 0 : 1;
  const KernelTable& k = kernels();
  matmul(k, pool_, nw.eh_proj, st.nextn_in.data(), n, st.x.data(), st.mm, st.in_gemm.data());
  OffsetExperts ex(*experts_, cfg_.n_layer + j);
  const LayerConfig& lc = ncfg.layers[0];
  const LayerWeights& lw = nw_run.layers[0];
  Batch b;
  b.n = n;
  b.tokens = nb.tokens;
  b.pos = nb.pos;
  ex.begin_batch(n);
  try {
    // The attention over every row (each writes its K/V row).
    FwdCtx c{ncfg, nw_run, k, pool_, st, kv, b, &ex, nullptr, 0, nullptr, nullptr};
    for (int i = 0; i < n; ++i) rmsnorm(st.x.data() + static_cast<size_t>(i) * d, lw.attn_norm.data, st.xn.data() + static_cast<size_t>(i) * d, d, cfg_.rms_eps);
    attention_gqa(c, 0);
    for (size_t x = 0; x < static_cast<size_t>(n) * d; ++x) st.x[x] += st.out[x];
    if (nb.n_out == 0) return;
    // The FFN for the output rows only, moved to the front.
    const int m = nb.n_out, skip = n - m;
    if (skip > 0) {
      std::memmove(st.x.data(), st.x.data() + static_cast<size_t>(skip) * d, sizeof(float) * static_cast<size_t>(m) * d);
      std::copy(st.solo.begin() + skip, st.solo.end(), st.solo.begin());
      std::copy(st.in_gemm.begin() + skip, st.in_gemm.end(), st.in_gemm.begin());
    }
    Batch bo;
    bo.n = m;
    bo.tokens = nb.tokens + skip;
    bo.pos = nb.pos + skip;
    FwdCtx co{ncfg, nw_run, k, pool_, st, kv, bo, &ex, nullptr, 0, nullptr, nullptr};
    for (int i = 0; i < m; ++i) rmsnorm(st.x.data() + static_cast<size_t>(i) * d, lw.ffn_norm.data, st.xn.data() + static_cast<size_t>(i) * d, d, cfg_.rms_eps);
    if (lc.ffn == FfnKind::Moe) ffn_moe(co, 0);
    else ffn_dense(co, 0);
    for (size_t x = 0; x < static_cast<size_t>(m) * d; ++x) st.x[x] += st.out[x];
  } catch (...) {
    experts_->on_abort();
    throw;
  }
  const int m = nb.n_out;
  nextn_head(j, m, logits);
  nextn_rows_ = m;
}

}  // namespace strata
