// Cache-conditional routing's selection (model/route_cache.h) on scores whose answers are known.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/ops.h"
#include "model/route_cache.h"

using namespace strata;

namespace {
// Experts marked true in a bool array are "in memory".
bool route_cache_in_set(int e, const void* ctx) { return static_cast<const std::vector<bool>*>(ctx)->at(static_cast<size_t>(e)); }
}  // namespace

TEST(RouteCache, KeepsTopJThenPrefersResidentCandidates) {
  // Scores by id: expert 7 best, then 6, 5, ... 0.
  std::vector<float> score(8);
  for (int e = 0; e < 8; ++e) score[static_cast<size_t>(e)] = static_cast<float>(e);
  std::vector<bool> res(8, false);
  res[2] = res[4] = res[0] = true;  // 4 (rank 3) and 2 (rank 5) are among the top 6; 0 (rank 7) is not
  int32_t sel[4];
  // J = 1, M = 6, k = 4: 7 kept; then the resident candidates 4 and 2; then the best other, 6.
  const int changed = select_cache_aware(score.data(), 8, 4, RouteCacheOptions{1, 6}, route_cache_in_set, &res, sel);
  EXPECT_EQ(std::vector<int32_t>(sel, sel + 4), (std::vector<int32_t>{7, 6, 4, 2}));  // score order
  EXPECT_EQ(changed, 1);  // 2 is outside the router's top 4 (7, 6, 5, 4)
  // M = 4: only the top 4 are candidates: nothing changes.
  EXPECT_EQ(select_cache_aware(score.data(), 8, 4, RouteCacheOptions{1, 4}, route_cache_in_set, &res, sel), 0);
  EXPECT_EQ(std::vector<int32_t>(sel, sel + 4), (std::vector<int32_t>{7, 6, 5, 4}));
  // J = 0, M = 8: three resident experts (4, 2, 0), then the best non-resident (7).
  EXPECT_EQ(select_cache_aware(score.data(), 8, 4, RouteCacheOptions{0, 8}, route_cache_in_set, &res, sel), 2);
  EXPECT_EQ(std::vector<int32_t>(sel, sel + 4), (std::vector<int32_t>{7, 4, 2, 0}));
}

TEST(RouteCache, JEqualToKOrEverythingResidentIsTheRoutersTopK) {
  std::vector<float> score = {0.3f, 0.9f, 0.1f, 0.9f, 0.5f, -0.2f, 0.7f, 0.05f, 0.6f, 0.0f};  // a tie: 1 and 3
  const int n = static_cast<int>(score.size()), k = 3;
  int32_t top[3], sel[3];
  top_k(score.data(), n, k, top);
  std::vector<bool> none(10, false), all(10, true);
  EXPECT_EQ(select_cache_aware(score.data(), n, k, RouteCacheOptions{3, 10}, route_cache_in_set, &none, sel), 0);  // J = k
  EXPECT_EQ(std::vector<int32_t>(sel, sel + k), std::vector<int32_t>(top, top + k));
  EXPECT_EQ(select_cache_aware(score.data(), n, k, RouteCacheOptions{0, 10}, route_cache_in_set, &all, sel), 0);  // all resident
  EXPECT_EQ(std::vector<int32_t>(sel, sel + k), std::vector<int32_t>(top, top + k));
  EXPECT_EQ(select_cache_aware(score.data(), n, k, RouteCacheOptions{1, 10}, route_cache_in_set, &none, sel), 0);  // none resident
  EXPECT_EQ(std::vector<int32_t>(sel, sel + k), std::vector<int32_t>(top, top + k));
}

TEST(RouteCache, NeverPicksAGroupLimitedExpertOverAnAllowedOne) {
  // Experts 4..7 are in a group the group limit dropped (-inf), and resident.
  std::vector<float> score = {0.4f, 0.3f, 0.2f, 0.1f, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
  std::vector<bool> res = {false, false, false, false, true, true, true, true};
  int32_t sel[2];
  EXPECT_EQ(select_cache_aware(score.data(), 8, 2, RouteCacheOptions{0, 8}, route_cache_in_set, &res, sel), 0);
  EXPECT_EQ(std::vector<int32_t>(sel, sel + 2), (std::vector<int32_t>{0, 1}));
}
