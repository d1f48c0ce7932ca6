#include "runtime/engine.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

Engine::Engine(std::unique_ptr<Model> model, const EngineOptions& opt) : model_(std::move(model)), opt_(opt) {
  if (opt_.n_ctx <= 0) opt_.n_ctx = model_->config().n_ctx_train > 0 ? model_->config().n_ctx_train : 4096;
  if (opt_.n_threads <= 0) opt_.n_threads = default_thread_count();
  STRATA_CHECK(opt_.n_batch > 0, "batch size must be positive (got {})", opt_.n_batch);
  pool_ = std::make_unique<ThreadPool>(opt_.n_threads);
  KvCacheOptions ko;
  ko.n_ctx = opt_.n_ctx;
  ko.n_seq = opt_.n_seq;
  ko.type_k = opt_.type_k;
  ko.type_v = opt_.type_v;
  kv_ = std::make_unique<KvCache>(model_->config(), ko);
  model_->set_threads(pool_.get());
  tier_ = std::make_unique<ExpertTier>(*model_, kv_->bytes(), opt_.n_batch, opt_.tier);
}

void Engine::eval(int seq, const int32_t* tokens, int n, int pos0, bool all_logits, std::vector<float>& logits) {
  STRATA_CHECK(n > 0, "nothing to evaluate");
  STRATA_CHECK(pos0 >= 0 && pos0 + n <= opt_.n_ctx, "{} tokens at position {} exceed the context size {} (use -c to enlarge it)", n, pos0,
               opt_.n_ctx);
  const int nv = model_->config().n_vocab;
  logits.resize(static_cast<size_t>(all_logits ? n : 1) * nv);
  for (int off = 0; off < n; off += opt_.n_batch) {
    const int m = std::min(opt_.n_batch, n - off);
    pos_.resize(m);
    seq_.assign(m, seq);
    want_.assign(m, 0);
    for (int i = 0; i < m; ++i) {
      pos_[i] = pos0 + off + i;
      want_[i] = all_logits ? 1 : 0;
    }
    const bool last_chunk = off + m == n;
    if (!all_logits && last_chunk) want_[m - 1] = 1;
    if (!all_logits && !last_chunk) {
      // No logits needed: still run the chunk (its KV entries matter).
      want_[m - 1] = 1;
    }
    Batch b;
    b.n = m;
    b.tokens = tokens + off;
    b.pos = pos_.data();
    b.seq = seq_.data();
    b.logits = want_.data();
    float* out = all_logits ? logits.data() + static_cast<size_t>(off) * nv : logits.data();
    model_->forward(b, *kv_, out);
  }
}

}  // namespace strata
