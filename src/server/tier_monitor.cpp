#include "server/tier_monitor.h"

#include "model/executor.h"
#include "runtime/device_report.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace strata::server {

using nlohmann::json;

namespace {

ExpertCacheCounters minus(const ExpertCacheCounters& a, const ExpertCacheCounters& b) {
  ExpertCacheCounters d;
  d.hits = a.hits - b.hits;
  d.misses = a.misses - b.misses;
  d.transient = a.transient - b.transient;
  d.bytes_read = a.bytes_read - b.bytes_read;
  d.reads = a.reads - b.reads;
  d.prefetch_issued = a.prefetch_issued - b.prefetch_issued;
  d.prefetch_used = a.prefetch_used - b.prefetch_used;
  d.prefetch_wasted = a.prefetch_wasted - b.prefetch_wasted;
  d.demand_prefetched = a.demand_prefetched - b.demand_prefetched;
  d.wait_s = a.wait_s - b.wait_s;
  return d;
}

void add(ExpertCacheCounters& a, const ExpertCacheCounters& d) {
  a.hits += d.hits;
  a.misses += d.misses;
  a.transient += d.transient;
  a.bytes_read += d.bytes_read;
  a.reads += d.reads;
  a.prefetch_issued += d.prefetch_issued;
  a.prefetch_used += d.prefetch_used;
  a.prefetch_wasted += d.prefetch_wasted;
  a.demand_prefetched += d.demand_prefetched;
  a.wait_s += d.wait_s;
}

json ratio(double num, double den) { return den > 0 ? json(num / den) : json(nullptr); }

// The cache figures of some passes: hit rate, bytes per token, prefetch precision / recall.
void cache_figures(json& j, const ExpertCacheCounters& c, uint64_t tokens) {
  j["hits"] = c.hits;
  j["misses"] = c.misses;
  j["bytes_read"] = c.bytes_read;
  j["hit_rate"] = ratio(static_cast<double>(c.hits), static_cast<double>(c.hits + c.misses));
  j["bytes_per_token"] = ratio(static_cast<double>(c.bytes_read), static_cast<double>(tokens));
  j["prefetch_issued"] = c.prefetch_issued;
  j["prefetch_precision"] = ratio(static_cast<double>(c.prefetch_used), static_cast<double>(c.prefetch_issued));
  j["prefetch_recall"] = ratio(static_cast<double>(c.demand_prefetched), static_cast<double>(c.misses + c.demand_prefetched));
  j["io_wait_s"] = c.wait_s;
}

}  // namespace

TierMonitor::TierMonitor(Engine& eng, const TierMonitorOptions& opt) : eng_(eng), opt_(opt), streaming_(eng.tier().cache() != nullptr) {
  n_layer_ = eng.config().n_layer;
  for (int l = 0; l < n_layer_; ++l) {
    const int ne = eng.config().layers[static_cast<size_t>(l)].n_expert;
    n_expert_ = std::max(n_expert_, ne);
    if (ne > 0) moe_layers_.push_back(l);
  }
  pass_counts_.assign(static_cast<size_t>(n_layer_) * n_expert_, 0);
  heat_.assign(pass_counts_.size(), 0.0f);
  last_ = eng.tier().counters();
}

void TierMonitor::on_route(int layer, int token, const int32_t* ids, int k) {
  if (layer < 0 || layer >= n_layer_) return;
  uint32_t* row = pass_counts_.data() + static_cast<size_t>(layer) * n_expert_;
  for (int j = 0; j < k; ++j)
    if (ids[j] >= 0 && ids[j] < n_expert_) row[ids[j]]++;
}

void TierMonitor::on_step(int tokens, int generated, double t0, double t1) {
  Sample s{t0, t1, tokens, generated, {}};
  // A background load that ends switches the engine to resident (no cache) between passes.
  const bool streaming = eng_.tier().cache() != nullptr;
  const ExpertCacheCounters now = eng_.tier().counters();
  s.c = minus(now, last_);
  last_ = now;
  const float decay = opt_.half_life_tokens > 0 ? static_cast<float>(std::exp2(-tokens / opt_.half_life_tokens)) : 1.0f;
  const LayerExecutor* ex = eng_.model().executor();
  const DeviceStats ds = ex ? ex->stats() : DeviceStats{};
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (ex) {  // the executor's totals since start (the server never resets them)
      gpu_ = device_report_json(*ex, static_cast<double>(std::max<uint64_t>(ds.tokens, 1)), ds.run_s);
    }
    streaming_ = streaming;
    for (size_t i = 0; i < heat_.size(); ++i) heat_[i] = heat_[i] * decay + static_cast<float>(pass_counts_[i]);
    steps_++;
    tokens_ += static_cast<uint64_t>(tokens);
    generated_ += static_cast<uint64_t>(generated);
    busy_s_ += t1 - t0;
    add(total_, s.c);
    recent_.push_back(s);
    while (!recent_.empty() && recent_.front().t1 < t1 - opt_.window_s) recent_.pop_front();
  }
  std::fill(pass_counts_.begin(), pass_counts_.end(), 0u);
  cv_.notify_all();
}

uint64_t TierMonitor::steps() const {
  std::lock_guard<std::mutex> lk(mu_);
  return steps_;
}

bool TierMonitor::wait(uint64_t seen, int timeout_ms) const {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return closed_ || steps_ != seen; });
  return !closed_;
}

bool TierMonitor::pause(int ms) const {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, std::chrono::milliseconds(ms), [&] { return closed_; });
  return !closed_;
}

void TierMonitor::close() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

// Under mu_.
json TierMonitor::totals_json() const {
  json t{{"steps", steps_}, {"tokens", tokens_}, {"generated", generated_}, {"busy_s", busy_s_}};
  if (streaming_ || total_.hits + total_.misses > 0) cache_figures(t, total_, tokens_);  // also what streamed before a background load ended
  return t;
}

// Under mu_: the passes that ended in the last window_s seconds (null when there were none).
json TierMonitor::recent_json(double now) const {
  uint64_t tokens = 0, generated = 0;
  double first_t0 = now, busy = 0;
  ExpertCacheCounters c;
  int passes = 0;
  for (const Sample& s : recent_) {
    if (s.t1 < now - opt_.window_s) continue;
    first_t0 = std::min(first_t0, s.t0);
    tokens += static_cast<uint64_t>(s.tokens);
    generated += static_cast<uint64_t>(s.generated);
    busy += s.t1 - s.t0;
    add(c, s.c);
    ++passes;
  }
  if (passes == 0) return nullptr;
  const double span = std::max(1e-6, std::min(opt_.window_s, now - first_t0));
  json r{{"window_s", opt_.window_s}, {"seconds", span},          {"passes", passes},
         {"tokens", tokens},          {"generated", generated},  {"tokens_per_s", static_cast<double>(generated) / span},
         {"busy_fraction", std::min(1.0, busy / span)}};
  if (!streaming_) return r;
  cache_figures(r, c, tokens);
  const double bw = static_cast<double>(c.bytes_read) / span;
  r["read_bw"] = bw;
  // The physical limit: the time the reads alone take at the measured disk bandwidth, per second.
  r["limit_fraction"] = opt_.disk_bw > 0 ? json(bw / opt_.disk_bw) : json(nullptr);
  r["io_wait_fraction"] = std::min(1.0, c.wait_s / span);
  return r;
}

// Under mu_: rows of n_expert cells 0..255 (heat / max heat), layer by layer.
json TierMonitor::heat_json() const {
  float mx = 0;
  for (float h : heat_) mx = std::max(mx, h);
  json rows = json::array();
  for (int l = 0; l < n_layer_; ++l) {
    std::vector<int> row(static_cast<size_t>(n_expert_));
    for (int e = 0; e < n_expert_; ++e) {
      const float h = heat_[static_cast<size_t>(l) * n_expert_ + e];
      row[static_cast<size_t>(e)] = mx > 0 ? static_cast<int>(std::lround(255.0f * h / mx)) : 0;
    }
    rows.push_back(std::move(row));
  }
  return json{{"layers", n_layer_}, {"experts", n_expert_}, {"moe_layers", moe_layers_}, {"half_life_tokens", opt_.half_life_tokens},
              {"max", mx},          {"cells", std::move(rows)}};
}

json TierMonitor::snapshot(double now) const {
  const MemoryPlan p = eng_.tier().plan_snapshot();  // an HTTP thread: the engine thread may change it
  json j;
  j["plan"] = {{"budget", p.budget},       {"dense", p.dense},          {"kv", p.kv},       {"scratch", p.scratch},
               {"logits", p.logits},       {"vocab", p.vocab},          {"requests", p.requests}, {"draft", p.draft}, {"planned", p.total()},
               {"experts_total", p.experts_total}, {"expert_cache", p.expert_cache}, {"cache_slots", p.cache_slots}, {"io", p.io}};
  j["disk"] = {{"read_bw", opt_.disk_bw > 0 ? json(opt_.disk_bw) : json(nullptr)}, {"probe_bytes", opt_.disk_probe_bytes}};
  if (!opt_.disk_drives_bw.empty()) j["disk"]["drives_bw"] = opt_.disk_drives_bw;
  std::lock_guard<std::mutex> lk(mu_);
  j["mode"] = streaming_ ? "streaming" : "resident";
  j["totals"] = totals_json();
  j["recent"] = recent_json(now);
  j["heat"] = heat_json();
  j["gpu"] = gpu_;
  return j;
}

}  // namespace strata::server
