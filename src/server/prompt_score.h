#pragma once
// Echo with logprobs (/v1/completions): the prompt tokens' logprobs, on the engine thread.
#include <cstdint>
#include <vector>

#include "server/scheduler.h"

namespace strata::server {

// The event carrying the logprobs of prompt[1..] with `n_top` alternatives (GenEvent::prompt_probs),
// from passes of their own over `seq` that keep every row's logits (Engine::eval_rows: at most the
// planned logit rows a pass); the rows stay in the slot, where the request then reuses them.
GenEvent score_prompt(Engine& eng, int seq, const std::vector<int32_t>& prompt, int n_top);

}  // namespace strata::server
