#pragma once
// The lightning indexer of DeepSeek Sparse Attention, shared by DeepSeek-V3.2 (one key per
// token, model/arch/deepseek32.cpp) and DeepSeek-V4 (one key per compressed 4-token block,
// model/arch/deepseek4_attn.cpp). Per query: idx_n_head heads of idx_head_dim values from the
// normalized q latent, one weight per head from the attention input, and for every visible key
//   score(key) = sum_h w_h * relu(q_h . key),   w = (idx_proj . a) / sqrt(idx_head_dim * idx_n_head);
// the query then attends to the idx_top_k keys of highest score. What differs between the two
// (where keys come from, which dims are roped) stays in the architecture files.
#include <cstdint>

#include "model/forward.h"

namespace strata {

// The indexer's queries iq [n, idx_n_head * idx_head_dim] = idx_q_b . qr (qr: [n, q_lora]) and
// weights iw [n, idx_n_head] = idx_proj . st.xn, pre-scaled by 1/sqrt(idx_head_dim * idx_n_head)
// as llama.cpp does (so a score is a plain weighted sum). RoPE of the queries is the caller's.
void indexer_project(FwdCtx& c, int layer, const float* qr, float* iq, float* iw);

// score = sum_h w[h] * relu(q_h . key) over the heads in order, q_h . key through ggml's f32 dot
// (q: [n_head, dim], w: [n_head] pre-scaled, key: [dim]).
float indexer_score(const KernelTable& k, const float* q, const float* w, const float* key, int n_head, int dim);

// The `top` indices of highest score[0..n) into sel[top] as ggml's CPU top-k picks them
// (std::partial_sort of 0..n-1 by value alone, so equal scores resolve as in llama.cpp when the
// row is the same); order: [n] scratch. Needs top <= n.
void indexer_top_k(const float* score, int n, int top, int32_t* order, int32_t* sel);

}  // namespace strata
