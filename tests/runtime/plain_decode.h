#pragma once
// Plain greedy decoding on sequence 0: the reference that speculative decoding (any draft source)
// must reproduce token for token.
#include <cstdint>
#include <vector>

#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace strata::test {

inline std::vector<int32_t> plain_greedy_tokens(Engine& eng, const std::vector<int32_t>& prompt, int n_gen) {
  SamplerParams sp;
  sp.temp = 0;
  Sampler s(sp, eng.config().n_vocab);
  std::vector<float> logits;
  eng.eval(0, prompt.data(), static_cast<int>(prompt.size()), 0, false, logits);
  std::vector<int32_t> hist = prompt, out;
  for (int i = 0; i < n_gen; ++i) {
    const int32_t t = s.sample(logits.data(), hist);
    out.push_back(t);
    hist.push_back(t);
    if (i + 1 < n_gen) eng.eval(0, &t, 1, static_cast<int>(hist.size()) - 1, false, logits);
  }
  return out;
}

}  // namespace strata::test
