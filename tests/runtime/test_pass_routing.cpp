// PassRouting records which rows of a pass routed to each expert (and passes every call on);
// attribute_drafts charges an expert only draft rows routed to, its bytes read and its compute
// unit, to the owner of those drafts (split when several owners' drafts share it), everything
// else to the pass; rejected_only lists the experts that only rejected rows needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "runtime/pass_routing.h"

using namespace strata;

namespace {

struct PassRoutingLog final : public RoutingObserver {
  int routes = 0, predicts = 0;
  void on_route(int, int, const int32_t*, int) override { ++routes; }
  void on_predict(int, const int32_t*, int) override { ++predicts; }
};

// Rows: 0 slot 0's pending token, 1-2 its drafts, 3 slot 1's pending token, 4 its draft.
// Layer 0: A=1 (rows 0, 1), B=2 (row 1), C=3 (rows 2, 4), D=4 (row 4); layer 1: E=0 (row 3).
void pass_routing_fill(RoutingObserver& pr) {
  const int32_t r0[] = {1}, r1[] = {1, 2}, r2[] = {3}, r4[] = {3, 4}, r3[] = {0};
  pr.on_route(0, 0, r0, 1);
  pr.on_route(0, 1, r1, 2);
  pr.on_route(0, 2, r2, 1);
  pr.on_route(0, 4, r4, 2);
  pr.on_route(1, 3, r3, 1);
  const int32_t pred[] = {5, 6};
  pr.on_predict(1, pred, 2);
}

}  // namespace

// Beside the model's other routing observers (RoutingObservers: every call reaches each one added,
// none once removed), it records which rows routed to which expert.
TEST(PassRouting, RecordsRowsPerExpertBesideOtherObservers) {
  PassRouting pr(2, 8);
  PassRoutingLog log, gone;
  RoutingObservers list;
  list.add(&log);
  list.add(&pr);
  list.add(&gone);
  list.add(&pr);  // once only
  list.remove(&gone);
  EXPECT_TRUE(list.contains(&pr));
  EXPECT_FALSE(list.contains(&gone));
  pr.begin();
  pass_routing_fill(list);
  EXPECT_EQ(log.routes, 5);
  EXPECT_EQ(log.predicts, 1);
  EXPECT_EQ(gone.routes, 0);
  ASSERT_EQ(pr.touched().size(), 5u);
  EXPECT_EQ(pr.touched()[0], (ExpertKey{0, 1}));
  EXPECT_EQ(pr.touched()[4], (ExpertKey{1, 0}));
  std::vector<int> rows;
  pr.for_rows(0, [&](int r) { rows.push_back(r); });
  std::sort(rows.begin(), rows.end());
  EXPECT_EQ(rows, (std::vector<int>{0, 1}));
  // The next pass starts empty.
  pr.begin();
  EXPECT_TRUE(pr.touched().empty());
  const int32_t one[] = {7};
  pr.on_route(1, 0, one, 1);
  ASSERT_EQ(pr.touched().size(), 1u);
  rows.clear();
  pr.for_rows(0, [&](int r) { rows.push_back(r); });
  EXPECT_EQ(rows, (std::vector<int>{0}));
}

TEST(PassRouting, DraftOnlyExpertsAreChargedToTheirOwner) {
  PassRouting pr(2, 8);
  pr.begin();
  pass_routing_fill(pr);
  const std::vector<int> owner = {-1, 0, 0, -1, 1};
  // Bytes read per touched expert, in touched() order: A 100, B 200, C 50, D 0 (in memory), E 30;
  // the pass read 20 more (a prefetch no row used).
  const std::vector<uint64_t> read = {100, 200, 50, 0, 30};
  std::vector<DraftShare> share(2);
  std::vector<int> seen;
  const PassSplit split = attribute_drafts(pr, owner, read, 400, share, seen);
  EXPECT_EQ(split.experts, 5u);
  EXPECT_DOUBLE_EQ(split.common_experts, 2);  // A, E
  EXPECT_EQ(share[0].bytes, 200u + 25u);      // B, half of C
  EXPECT_DOUBLE_EQ(share[0].experts, 1.5);
  EXPECT_EQ(share[1].bytes, 25u);             // half of C, D read nothing
  EXPECT_DOUBLE_EQ(share[1].experts, 1.5);
  EXPECT_EQ(split.common_bytes, 400u - 250u);
  // Only slot 1's drafts miss: every byte they caused is slot 1's, none slot 0's.
  const std::vector<uint64_t> read1 = {0, 0, 0, 64, 0};
  const PassSplit s1 = attribute_drafts(pr, owner, read1, 64, share, seen);
  EXPECT_EQ(share[0].bytes, 0u);
  EXPECT_EQ(share[1].bytes, 64u);
  EXPECT_EQ(s1.common_bytes, 0u);
  // No drafts in the pass: all common.
  const std::vector<int> plain(5, -1);
  const PassSplit s2 = attribute_drafts(pr, plain, read, 400, share, seen);
  EXPECT_EQ(share[0].bytes + share[1].bytes, 0u);
  EXPECT_EQ(s2.common_bytes, 400u);
  EXPECT_DOUBLE_EQ(s2.common_experts, 5);
}

TEST(PassRouting, RejectedOnlyExpertsAreThoseNoKeptRowNeeded) {
  PassRouting pr(2, 8);
  pr.begin();
  pass_routing_fill(pr);
  std::vector<ExpertKey> out;
  // Slot 0 kept draft row 1, rejected row 2; slot 1 rejected row 4.
  rejected_only(pr, std::vector<uint8_t>{0, 0, 1, 0, 1}, out);
  EXPECT_EQ(out, (std::vector<ExpertKey>{{0, 3}, {0, 4}}));  // C (rows 2, 4), D (row 4); not B (row 1 kept)
  rejected_only(pr, std::vector<uint8_t>{0, 0, 0, 0, 0}, out);
  EXPECT_TRUE(out.empty());
}
