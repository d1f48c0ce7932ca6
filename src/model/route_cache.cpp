#include "model/route_cache.h"

#include <algorithm>
#include <cmath>

#include "core/limits.h"
#include "kernels/ops.h"

namespace strata {

int select_cache_aware(const float* score, int n, int k, const RouteCacheOptions& rc, ResidentFn resident, const void* ctx, int32_t* sel) {
  const int m = std::clamp(rc.cands, k, n);
  int32_t cand[kMaxExperts];  // the top m, best first
  top_k(score, n, m, cand);
  const int keep = std::clamp(rc.keep, 0, k);
  bool take[kMaxExperts] = {};  // by rank in cand
  int taken = 0;
  for (int r = 0; r < keep; ++r) take[r] = true, ++taken;
  for (int r = keep; r < m && taken < k; ++r)
    if (std::isfinite(score[cand[r]]) && resident(cand[r], ctx)) take[r] = true, ++taken;
  for (int r = keep; r < m && taken < k; ++r)
    if (!take[r]) take[r] = true, ++taken;
  int out = 0, changed = 0;
  for (int r = 0; r < m; ++r)
    if (take[r]) {
      sel[out++] = cand[r];
      changed += r >= k;
    }
  return changed;
}

}  // namespace strata
