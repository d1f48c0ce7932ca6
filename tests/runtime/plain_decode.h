#pragma once
// Decoding on sequence 0 through the loop `strata run` uses (runtime/decode.h: the Generator, plain
// passes or a SpeculativeDecoder's verification passes): plain greedy decoding is the reference
// that speculative decoding (any draft source) must reproduce token for token.
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "runtime/decode.h"
#include "runtime/engine.h"
#include "runtime/generator.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"

namespace strata::test {

struct DecodeRun {
  std::vector<int32_t> out;  // the n_gen tokens after the prompt
  SpecStats stats;           // with a draft source
};

// n_gen tokens after `prompt` (evaluated here) with sampling `sp`; with `draft`, verification
// passes (the decoder is made before the prompt's pass, so its routing is remembered);
// after_pass(decoder, pass index) follows each of them.
inline DecodeRun decode_tokens(Engine& eng, const std::vector<int32_t>& prompt, int n_gen, const SamplerParams& sp, DraftSource* draft = nullptr,
                               const SpecOptions& so = {}, const std::function<void(const SpeculativeDecoder&, int)>& after_pass = {}) {
  GenerateParams gp;
  gp.prompt = prompt;
  gp.sampling = sp;
  gp.max_tokens = n_gen;
  gp.ignore_eos = true;
  Generator gen(nullptr, eng.config().n_vocab);
  std::optional<SpeculativeDecoder> sd;
  if (draft) sd.emplace(eng, 0, gen, draft, so);
  std::vector<float> logits;
  eng.eval(0, prompt.data(), static_cast<int>(prompt.size()), 0, false, logits);
  gen.start(gp, eng.options().n_ctx);
  DecodeHooks hooks;
  int pass = -1;  // on_tokens follows the prompt's row first
  if (sd && after_pass) hooks.on_tokens = [&](const Generator&) {
    if (pass >= 0) after_pass(*sd, pass);
    ++pass;
  };
  decode(eng, 0, gen, logits, sd ? &*sd : nullptr, hooks);
  DecodeRun r;
  r.out.assign(gen.history().begin() + static_cast<std::ptrdiff_t>(prompt.size()), gen.history().end());
  if (sd) r.stats = sd->stats();
  return r;
}

inline std::vector<int32_t> plain_greedy_tokens(Engine& eng, const std::vector<int32_t>& prompt, int n_gen) {
  SamplerParams sp;
  sp.temp = 0;
  return decode_tokens(eng, prompt, n_gen, sp).out;
}

// A clock for the cost models that advances `step` seconds each time it is read (and `add()`
// more): speculation's decisions then follow the passes, not the machine's speed.
class TickClock {
 public:
  explicit TickClock(double step = 1e-3) : step_(step) {}
  double now() { return t_ += step_; }
  void add(double s) { t_ += s; }
  std::function<double()> fn() {
    return [this] { return now(); };
  }

 private:
  double step_;
  double t_ = 0;
};

}  // namespace strata::test
