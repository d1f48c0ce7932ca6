#include "server/prompt_score.h"

namespace strata::server {

GenEvent score_prompt(Engine& eng, int seq, const std::vector<int32_t>& prompt, int n_top) {
  GenEvent e;
  const int n = static_cast<int>(prompt.size());
  if (n < 2) return e;
  e.prompt_probs.resize(prompt.size() - 1);
  const int nv = eng.config().n_vocab;
  eng.eval_rows(seq, prompt.data(), n, 0, 0, [&](int i, const float* row) {
    if (i + 1 < n) token_logprobs(row, nv, prompt[static_cast<size_t>(i) + 1], n_top, e.prompt_probs[static_cast<size_t>(i)]);
  });
  return e;
}

}  // namespace strata::server
