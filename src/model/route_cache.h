#pragma once
// Cache-conditional routing (issue 37, --route-cache J[,M]; after Skliar et al., "Mixture of
// Cache-Conditional Experts"): per token and MoE layer keep the router's top J experts and fill
// the other k - J slots from its top M candidates, preferring those already in memory (the expert
// cache's RAM, or a device's VRAM), then by score. Lossy: the gate weights of the chosen experts
// are computed as the architecture computes them (ffn.cpp's finish_weights), so a different
// expert gets its own gate probability, renormalized and scaled as usual.
#include <algorithm>
#include <atomic>
#include <cstdint>

namespace strata {

struct RouteCacheOptions {
  int keep = -1;  // J: the router's top J are always kept (-1: off)
  int cands = 0;  // M: the candidates the other slots are drawn from (clamped to [k, n_expert])
  bool on() const { return keep >= 0; }
};

// What cache-conditional routing did since load (route_batch's choices; prefetch predictions not
// counted): (token, slot) choices made, and those that are not among the router's own top k.
// Written by the thread that runs the passes, read by any (a server's /stats): relaxed atomics.
struct RouteCacheCounters {
  std::atomic<uint64_t> slots{0}, changed{0};
  void add(int k, int n_changed) {
    slots.fetch_add(static_cast<uint64_t>(k), std::memory_order_relaxed);
    changed.fetch_add(static_cast<uint64_t>(n_changed), std::memory_order_relaxed);
  }
  double agreement() const {
    const uint64_t s = slots.load(std::memory_order_relaxed), c = changed.load(std::memory_order_relaxed);
    return s ? 1.0 - double(std::min(c, s)) / double(s) : 1.0;
  }
};

// Chooses k of n experts by score [n] (-inf: not selectable: a group limit): the top `keep` by
// score, then candidates of the top `cands` whose resident(e, ctx) is true, by score, then the
// remaining candidates by score. sel[k] lists the chosen in score order. Ties rank by lower id (as
// top_k). Returns how many chosen are outside the plain top k. keep >= k gives exactly top_k.
using ResidentFn = bool (*)(int expert, const void* ctx);
int select_cache_aware(const float* score, int n, int k, const RouteCacheOptions& rc, ResidentFn resident, const void* ctx, int32_t* sel);

}  // namespace strata
