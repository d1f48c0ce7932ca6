#pragma once
// Replaying a routing trace through two cache levels, VRAM <- RAM <- SSD (issue 36, item 5).
//
// Each level is an ExpertCacheState with its own instance of the same policy (make_policy), under
// its own budget; the replay semantics are cache_sim.h's (events, steps, cold start per run, the
// experts of the current event protected in both levels). Per access of expert k:
//
//   inclusive  VRAM holds copies of RAM-resident experts. RAM sees every access (a single-level
//              cache of the RAM budget: its misses are the SSD reads); then, if k is in RAM, the
//              VRAM level sees the access (a miss there that it admits is an upload). An expert RAM
//              evicts leaves VRAM too, so VRAM stays a subset of RAM.
//   exclusive  an expert is in at most one level. A VRAM hit touches only VRAM. Otherwise RAM sees
//              the access: a miss is read from SSD into RAM (kept or not by RAM's policy; the CPU
//              computes it), a hit is a reuse, offered to VRAM (its policy's admission and victims):
//              admitted, the expert is uploaded and gives up its RAM slot. An expert VRAM evicts is
//              dropped (read from SSD again when next needed), as issue 36 describes the design, or
//              with `exclusive_demote` moved into RAM (evicting RAM's victims, which are dropped).
//
// So VRAM's policy learns from the accesses that find the expert in VRAM or RAM, RAM's from
// VRAM misses; the inclusive RAM level sees all accesses, the strongest inclusive baseline (its
// SSD reads are exactly a RAM-only cache's). Policies that read ahead (prefetch_wanted, --replay-predictions)
// are not replayed here: both levels page on demand, transient reads (an expert admitted by
// neither level) included.
//
// Bounds (tier_bounds): with the uniform expert sizes of trace_shape, belady-bypass (cache_sim.h)
// gives the fewest misses of one cache of C slots that may serve a miss without keeping it.
//   - SSD reads: every expert any level holds is in at most V + R slots (exclusive) or in the R
//     slots of RAM (inclusive), so no schedule reads fewer than belady-bypass(V + R), resp.
//     belady-bypass(R). Reading fewer is impossible; whether one schedule reaches it and the
//     VRAM bound at the same time is not claimed.
//   - VRAM hits: VRAM is one cache of V slots (min(V, R) when inclusive) over the same accesses,
//     so no schedule hits VRAM more than belady-bypass(V).
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "experts/cache_sim.h"
#include "experts/cache_state.h"

namespace strata {

enum class TierMode : uint8_t { exclusive, exclusive_demote, inclusive };
std::string_view tier_mode_name(TierMode m);  // "exclusive", "exclusive-demote", "inclusive"
TierMode parse_tier_mode(std::string_view s);  // throws strata::Error naming the choices

struct TierSimOptions {
  uint64_t vram_bytes = 0;
  uint64_t ram_bytes = 0;
  bool per_layer = false;  // one pool per layer in each level
  PhaseFilter phase = PhaseFilter::decode;
  TierMode mode = TierMode::exclusive;
  // Called after every event (a layer's experts of one step) with both levels: the invariant tests.
  std::function<void(int layer, std::span<const int32_t> experts, const ExpertCacheState& vram, const ExpertCacheState& ram)> after_event;
};

struct TierResult {
  std::string policy;
  TierMode mode = TierMode::exclusive;
  uint64_t steps = 0;      // decode tokens (a prompt chunk is one)
  uint64_t accesses = 0;
  uint64_t vram_hits = 0;  // computed from VRAM
  uint64_t ram_hits = 0;   // found in RAM (and uploaded when VRAM admits it)
  uint64_t ssd_reads = 0;  // in neither level: read from SSD
  uint64_t transient = 0;  // ... of which kept by neither level
  uint64_t uploads = 0;    // experts VRAM admitted (from RAM or the SSD read)
  uint64_t bytes_ssd = 0;
  uint64_t bytes_uploaded = 0;
  double per_step(uint64_t n) const { return steps ? double(n) / double(steps) : 0.0; }
};

// policy_spec: a make_policy name (not belady, whose future is one level's; not predict-pf, whose
// prefetches are not replayed here).
TierResult simulate_tiers(const RoutingTrace& t, const CacheShape& shape, const TierSimOptions& o, std::string_view policy_spec);

struct TierBounds {
  uint64_t max_vram_hits = 0;  // belady-bypass at V (min(V, R) when inclusive)
  uint64_t min_ssd_reads = 0;  // belady-bypass at V + R (exclusive) or R (inclusive)
  uint64_t bytes_min_ssd = 0;
};
TierBounds tier_bounds(const RoutingTrace& t, const CacheShape& shape, const TierSimOptions& o);

}  // namespace strata
