// /metrics' expert-parallel families (server/metrics.h) without MPI: one counter family per figure
// with a sample per rank, labelled rank="r", beside --replica's label.
#include <gtest/gtest.h>

#include "server/metrics.h"

using namespace strata;
using namespace strata::server;

TEST(MetricsEp, OneFamilyPerFigureASamplePerRank) {
  std::vector<EpRankStats> ranks(2);
  ranks[0].jobs = 12, ranks[0].pairs = 40;
  ranks[1].hits = 3, ranks[1].misses = 5, ranks[1].bytes_read = 4096, ranks[1].jobs = 12, ranks[1].pairs = 40, ranks[1].compute_s = 0.25;
  SchedulerStats s;
  RequestCounters req;
  const std::string text = render_metrics(&s, req, ServerState{true, false, ""}, &ranks);
  for (const char* line : {"# TYPE strata_ep_rank_jobs_total counter\nstrata_ep_rank_jobs_total{rank=\"0\"} 12\nstrata_ep_rank_jobs_total{rank=\"1\"} 12\n",
                           "strata_ep_rank_bytes_read_total{rank=\"1\"} 4096\n", "strata_ep_rank_misses_total{rank=\"1\"} 5\n",
                           "strata_ep_rank_hits_total{rank=\"1\"} 3\n", "strata_ep_rank_pairs_total{rank=\"0\"} 40\n",
                           "strata_ep_rank_compute_seconds_total{rank=\"1\"} 0.25\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nin:\n" << text;
  EXPECT_EQ(render_metrics(&s, req, ServerState{true, false, ""}).find("strata_ep_rank"), std::string::npos);  // without it: none
  const std::string labelled = render_metrics(&s, req, ServerState{true, false, "r1"}, &ranks);
  EXPECT_NE(labelled.find("strata_ep_rank_jobs_total{replica=\"r1\",rank=\"1\"} 12\n"), std::string::npos) << labelled;
}
