#include "runtime/decode.h"

#include "core/error.h"

namespace strata {

void decode(Engine& eng, int seq, Generator& gen, std::span<const float> last, SpeculativeDecoder* spec, const DecodeHooks& hooks) {
  STRATA_CHECK(static_cast<int>(last.size()) == eng.config().n_vocab, "decode: the prompt's logits row has {} values, the vocabulary {}",
               last.size(), eng.config().n_vocab);
  if (!gen.active()) return;  // max_tokens 0
  gen.take(last.data());
  if (hooks.on_tokens) hooks.on_tokens(gen);
  std::vector<float> logits;
  for (int pass = 0; gen.active(); ++pass) {
    if (hooks.go_on && !hooks.go_on()) {
      gen.end(Finish::Length);
      if (hooks.on_tokens) hooks.on_tokens(gen);
      return;
    }
    if (hooks.before_pass) hooks.before_pass(pass);
    if (spec) {
      spec->step();
    } else {
      const int32_t t = gen.last();
      eng.eval(seq, &t, 1, static_cast<int>(gen.history().size()) - 1, false, logits);
      gen.take(logits.data());
    }
    if (hooks.on_tokens) hooks.on_tokens(gen);
  }
}

}  // namespace strata
