#include "runtime/routing_memory.h"

#include <algorithm>

#include "core/error.h"
#include "experts/expert_cache.h"

namespace strata {

RouteLayout::RouteLayout(const ModelConfig& cfg) {
  moe_of.assign(cfg.layers.size(), -1);
  for (size_t l = 0; l < cfg.layers.size(); ++l) {
    const LayerConfig& lc = cfg.layers[l];
    if (lc.ffn != FfnKind::Moe || lc.n_expert <= 0) continue;
    moe_of[l] = static_cast<int>(moe_layers.size());
    moe_layers.push_back(static_cast<int>(l));
    top_k = std::max(top_k, lc.n_expert_used);
  }
}

SeqRouting::SeqRouting(const ModelConfig& cfg, int n_ctx) : lay_(cfg), n_ctx_(std::max(0, n_ctx)) {
  tok_.assign(static_cast<size_t>(n_ctx_), -1);
  prev_same_.assign(static_cast<size_t>(n_ctx_), -1);
  last_.assign(static_cast<size_t>(std::max(0, cfg.n_vocab)), -1);
  routes_.assign(static_cast<size_t>(n_ctx_) * static_cast<size_t>(width()), -1);
}

void SeqRouting::truncate(int n) {
  for (int p = n_ - 1; p >= std::max(0, n); --p) {
    const int32_t t = tok_[static_cast<size_t>(p)];
    if (t >= 0) last_[static_cast<size_t>(t)] = prev_same_[static_cast<size_t>(p)];
  }
  n_ = std::clamp(n, 0, n_);
}

// Positions between length() and pos0 (rows this memory did not see) are kept as unknown: no token,
// no routes.
void SeqRouting::commit(int pos0, const int32_t* tokens, int n, const int16_t* routes) {
  STRATA_CHECK(pos0 >= 0 && n >= 0 && pos0 + n <= n_ctx_, "routing memory: positions {}..{} outside the context of {}", pos0, pos0 + n, n_ctx_);
  truncate(pos0);
  const size_t w = static_cast<size_t>(width());
  for (int p = n_; p < pos0; ++p) {
    tok_[static_cast<size_t>(p)] = -1;
    std::fill_n(routes_.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(p) * w), w, int16_t{-1});
  }
  for (int i = 0; i < n; ++i) {
    const size_t p = static_cast<size_t>(pos0 + i);
    const int32_t t = tokens[i] >= 0 && static_cast<size_t>(tokens[i]) < last_.size() ? tokens[i] : -1;
    tok_[p] = t;
    prev_same_[p] = t >= 0 ? last_[static_cast<size_t>(t)] : -1;
    if (t >= 0) last_[static_cast<size_t>(t)] = static_cast<int32_t>(p);
    std::copy_n(routes + static_cast<size_t>(i) * w, w, routes_.begin() + static_cast<ptrdiff_t>(p * w));
  }
  n_ = pos0 + n;
}

int SeqRouting::source(int32_t t, int32_t prev) const {
  if (t < 0 || static_cast<size_t>(t) >= last_.size()) return -1;
  const int latest = last_[static_cast<size_t>(t)];
  if (prev < 0) return latest;
  int q = latest;
  for (int walk = 0; q >= 0 && walk < kMaxWalk; ++walk, q = prev_same_[static_cast<size_t>(q)])
    if (q >= 1 && tok_[static_cast<size_t>(q - 1)] == prev) return q;
  return latest;
}

uint64_t routing_memory_bytes(const ModelConfig& cfg, int n_ctx, int n_batch, int n_seq) {
  const RouteLayout lay(cfg);
  if (lay.n_moe() == 0) return 0;
  int n_expert = 1;
  for (const LayerConfig& l : cfg.layers) n_expert = std::max(n_expert, l.n_expert);
  const uint64_t w = static_cast<uint64_t>(lay.width()), ctx = static_cast<uint64_t>(std::max(0, n_ctx));
  const uint64_t seq = ctx * (2 * sizeof(int32_t) + w * sizeof(int16_t)) + static_cast<uint64_t>(std::max(0, cfg.n_vocab)) * sizeof(int32_t);
  const uint64_t tap = static_cast<uint64_t>(std::max(0, n_batch)) * w * sizeof(int16_t);
  const uint64_t pred = static_cast<uint64_t>(n_batch + 1) * sizeof(int) + cfg.layers.size() * static_cast<uint64_t>(n_expert) * sizeof(uint32_t);
  return static_cast<uint64_t>(std::max(0, n_seq)) * seq + tap + pred;
}

RoutingTap::RoutingTap(Engine& eng)
    : eng_(eng), lay_(eng.config()) {
  mem_.assign(static_cast<size_t>(std::max(0, eng.n_seq())), nullptr);
  staged_.assign(static_cast<size_t>(eng.options().n_batch) * static_cast<size_t>(lay_.width()), -1);
  eng.model().add_routing_observer(this);
  eng.add_pass_listener(this);
}

void RoutingTap::track(int seq, SeqRouting* mem) {
  STRATA_CHECK(seq >= 0 && static_cast<size_t>(seq) < mem_.size(), "routing tap: sequence {} of {}", seq, mem_.size());
  STRATA_CHECK(!mem || (mem->width() == lay_.width() && mem->n_moe() == lay_.n_moe()), "routing tap: a routing memory of another model");
  mem_[static_cast<size_t>(seq)] = mem;
}

RoutingTap::~RoutingTap() { detach(); }

void RoutingTap::detach() {
  if (!attached_) return;
  attached_ = false;
  eng_.model().remove_routing_observer(this);
  eng_.remove_pass_listener(this);
}

void RoutingTap::on_route(int layer, int token, const int32_t* ids, int k) {
  const int m = lay_.moe_index(layer);
  const size_t w = static_cast<size_t>(lay_.width()), tk = static_cast<size_t>(lay_.top_k);
  if (m >= 0 && token >= 0 && (static_cast<size_t>(token) + 1) * w <= staged_.size()) {
    int16_t* dst = staged_.data() + static_cast<size_t>(token) * w + static_cast<size_t>(m) * tk;
    for (size_t j = 0; j < tk; ++j) dst[j] = j < static_cast<size_t>(k) ? static_cast<int16_t>(ids[j]) : int16_t{-1};
  }
}

void RoutingTap::on_predict(int, const int32_t*, int) {}

void RoutingTap::on_pass(Engine& eng, std::span<const SeqInput> inputs) {
  const size_t w = static_cast<size_t>(lay_.width());
  size_t row0 = 0;
  for (const SeqInput& in : inputs) {
    SeqRouting* mem = in.seq >= 0 && static_cast<size_t>(in.seq) < mem_.size() ? mem_[static_cast<size_t>(in.seq)] : nullptr;
    if (mem) mem->commit(eng.seq_length(in.seq) - in.n, in.tokens, in.n, staged_.data() + row0 * w);
    row0 += static_cast<size_t>(in.n);
  }
  std::fill_n(staged_.begin(), std::min(staged_.size(), row0 * w), int16_t{-1});
}

RoutePredictor::RoutePredictor(const ModelConfig& cfg, int max_rows) {
  for (const LayerConfig& l : cfg.layers) n_expert_ = std::max(n_expert_, l.n_expert);
  src_.assign(static_cast<size_t>(std::max(0, max_rows)), -1);
  stamp_.assign(cfg.layers.size() * static_cast<size_t>(std::max(1, n_expert_)), 0);
}

void RoutePredictor::predict(const SeqRouting& mem, int32_t prev, int32_t pending, std::span<const int32_t> drafts) {
  STRATA_CHECK(drafts.size() + 1 <= src_.size(), "route prediction: {} rows, room for {}", drafts.size() + 1, src_.size());
  n_rows_ = static_cast<int>(drafts.size()) + 1;
  // A source whose routes were not seen (the tap was not the model's observer then) predicts nothing.
  auto known = [&](int q) { return q >= 0 && mem.width() > 0 && mem.routes(q)[0] >= 0 ? q : -1; };
  src_[0] = known(mem.source(pending, prev));
  for (size_t i = 0; i < drafts.size(); ++i) src_[i + 1] = known(mem.source(drafts[i], i == 0 ? pending : drafts[i - 1]));
}

double RoutePredictor::extra_bytes(const SeqRouting& mem, const ExpertCache& cache, std::span<double> out) {
  if (++gen_ == 0) {  // wrapped: forget every stamp
    std::fill(stamp_.begin(), stamp_.end(), 0u);
    gen_ = 1;
  }
  const int tk = mem.top_k();
  // Bytes of the experts the row at `src` routed to that no earlier row of this pass claimed and the cache lacks.
  auto row_bytes = [&](int src) {
    const std::span<const int16_t> r = mem.routes(src);
    double bytes = 0;
    for (int m = 0; m < mem.n_moe(); ++m) {
      const int layer = mem.layer_of(m);
      for (int j = 0; j < tk; ++j) {
        const int e = r[static_cast<size_t>(m * tk + j)];
        if (e < 0 || e >= n_expert_) continue;
        uint32_t& s = stamp_[static_cast<size_t>(layer) * static_cast<size_t>(n_expert_) + static_cast<size_t>(e)];
        if (s == gen_) continue;
        s = gen_;
        const ExpertKey key{layer, e};
        if (!cache.holds(key)) bytes += static_cast<double>(cache.expert_read_bytes(key));
      }
    }
    return bytes;
  };
  const double row0 = n_rows_ > 0 && src_[0] >= 0 ? row_bytes(src_[0]) : kUnknown;
  for (int i = 1; i < n_rows_ && static_cast<size_t>(i - 1) < out.size(); ++i)
    out[static_cast<size_t>(i - 1)] = src_[static_cast<size_t>(i)] >= 0 ? row_bytes(src_[static_cast<size_t>(i)]) : kUnknown;
  return row0;
}

double RoutePredictor::price(SeqRouting& mem, int seq_len, int32_t prev, int32_t pending, std::span<const int32_t> drafts, ExpertTier& tier,
                             std::span<double> row_bytes) {
  std::fill(row_bytes.begin(), row_bytes.end(), kUnknown);
  const ExpertCache* cache = tier.cache();
  if (!cache) return kUnknown;
  mem.truncate(seq_len);
  predict(mem, prev, pending, drafts);
  return extra_bytes(mem, *cache, row_bytes);
}

double RoutePredictor::total(std::span<const double> row_bytes, int k) {
  if (k <= 0 || static_cast<size_t>(k) > row_bytes.size()) return kUnknown;
  double sum = 0;
  for (int i = 0; i < k; ++i) {
    if (row_bytes[static_cast<size_t>(i)] < 0) return kUnknown;
    sum += row_bytes[static_cast<size_t>(i)];
  }
  return sum;
}

void match_routes(std::span<const int16_t> predicted, std::span<const int16_t> routed, int top_k, RouteMatch& m) {
  for (size_t b = 0; b + static_cast<size_t>(top_k) <= routed.size(); b += static_cast<size_t>(top_k)) {
    for (int j = 0; j < top_k; ++j) {
      const int16_t r = routed[b + static_cast<size_t>(j)];
      if (r < 0) continue;
      ++m.routed;
      if (predicted.empty()) continue;
      for (int i = 0; i < top_k; ++i) m.both += predicted[b + static_cast<size_t>(i)] == r;
    }
    if (!predicted.empty())
      for (int i = 0; i < top_k; ++i) m.predicted += predicted[b + static_cast<size_t>(i)] >= 0;
  }
}

}  // namespace strata
