#include "model/lightning_indexer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace strata {

void indexer_project(FwdCtx& c, int layer, const float* qr, float* iq, float* iw) {
  const LayerConfig& lc = c.cfg.layers[layer];
  const LayerWeights& lw = c.w.layers[layer];
  const int n = c.b.n, I = lc.idx_n_head;
  c.mm(lw.idx_q_b, qr, n, iq);
  c.mm(lw.idx_proj, c.st.xn.data(), n, iw);
  const float scale = 1.0f / std::sqrt(static_cast<float>(lc.idx_head_dim) * static_cast<float>(I));
  for (size_t j = 0; j < static_cast<size_t>(n) * I; ++j) iw[j] = iw[j] * scale;
}

float indexer_score(const KernelTable& k, const float* q, const float* w, const float* key, int n_head, int dim) {
  float acc = 0.0f;
  for (int h = 0; h < n_head; ++h) acc += std::max(0.0f, k.dot_f32(dim, q + static_cast<size_t>(h) * dim, key)) * w[h];
  return acc;
}

void indexer_top_k(const float* score, int n, int top, int32_t* order, int32_t* sel) {
  std::iota(order, order + n, 0);
  std::partial_sort(order, order + top, order + n, [score](int32_t x, int32_t y) { return score[x] > score[y]; });
  std::copy(order, order + top, sel);
}

}  // namespace strata
