#include "runtime/prompt_experts.h"

#include <utility>

#include "runtime/expert_tier.h"

namespace strata {

PromptExperts::PromptExperts(StandInExperts& copy, ExpertTier& tier, int min_tokens) : copy_(copy), tier_(tier), min_tokens_(min_tokens) {
  copy_.set_active(false);
}

size_t PromptExperts::set(bool on) {
  const bool was = copy_.active();
  copy_.set_active(on);
  if (on || !was) return 0;
  std::vector<ExpertKey> hot = copy_.hottest();
  const size_t n = hot.size();
  ExpertCache* cache = tier_.cache();
  if (!cache || hot.empty()) return 0;
  cache->warm(std::move(hot));
  return n;
}

}  // namespace strata
