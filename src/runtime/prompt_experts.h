#pragma once
// --pp-model FILE.gguf (issue 37): the passes of long prompts take the routed experts that are not
// in memory from a low-bit copy of the model (model/standin_experts.h, keep 0); decoding takes the
// model's own. When passes with the copy on are followed by one without it (the prompt ended, or a
// decoding row joined the pass), the experts the copy stood in for, most used first, go to the
// expert cache's warm fill (free slots only, read beside decoding), so decoding does not start cold.
// One per engine: `strata run|bench|perplexity` switch it per prompt (cli's PromptPass), the
// server's scheduler per pass (on only when every row of the pass is a prompt row of a prompt of
// at least min_tokens() tokens). Engine thread only, between passes.
#include "model/standin_experts.h"

namespace strata {

class ExpertTier;

class PromptExperts {
 public:
  PromptExperts(StandInExperts& copy, ExpertTier& tier, int min_tokens);
  int min_tokens() const { return min_tokens_; }
  // Before a pass: whether it takes the copy's experts. Turning it off after it was on queues the
  // warm fill of what the copy stood in for; returns how many experts that queued (0 otherwise).
  size_t set(bool on);
  bool on() const { return copy_.active(); }
  const StandInCounters& counters() const { return copy_.counters(); }

 private:
  StandInExperts& copy_;
  ExpertTier& tier_;
  int min_tokens_;
};

}  // namespace strata
