#pragma once
// The single-sequence generation loop of `strata run`, `strata chat` and the tests (the server's
// scheduler batches the same Generator over its slots): from the prompt's last logits row on, the
// generator chooses each token and decides the end; a token is evaluated by one plain pass, or a
// speculative decoder verifies it with its drafts in one pass.
#include <functional>
#include <span>
#include <vector>

#include "runtime/engine.h"
#include "runtime/generator.h"
#include "runtime/speculative.h"

namespace strata {

struct DecodeHooks {
  // Asked before every pass; false stops: the generation ends as Length, its held text released
  // (Ctrl-C). Null: until the generator ends.
  std::function<bool()> go_on;
  // After the tokens of each pass were taken (the first one: after the prompt's row); drain the
  // generator's text here.
  std::function<void(const Generator&)> on_tokens;
  // Before each decoding pass, with its index from 0 (e.g. a routing recorder's step).
  std::function<void(int pass)> before_pass;
};

// Generates on sequence `seq`, whose rows hold the started generator's prompt, from `last` (the
// prompt's last logits row) until the generator ends or hooks.go_on says stop. spec: verification
// passes (null: one plain pass per token).
void decode(Engine& eng, int seq, Generator& gen, std::span<const float> last, SpeculativeDecoder* spec, const DecodeHooks& hooks = {});

}  // namespace strata
