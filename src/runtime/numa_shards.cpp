#include "runtime/numa_shards.h"

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstring>
#include <exception>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "core/spin_pause.h"
#include "core/thread_pool.h"
#include "core/units.h"
#include "experts/expert_cache.h"
#include "experts/expert_store.h"
#include "model/expert_layout.h"
#include "runtime/engine.h"
#include "runtime/expert_tier.h"

namespace strata {

NumaMode parse_numa_mode(const std::string& s) {
  if (s == "off") return NumaMode::Off;
  if (s == "shard") return NumaMode::Shard;
  if (s == "interleave") return NumaMode::Interleave;
  fail("--numa '{}': expected shard, interleave or off", s);
}

double share_of_node(const EpPlan& plan, int node) {
  uint64_t all = 0;
  for (uint64_t b : plan.bytes) all += b;
  if (plan.ranks <= 1 || all == 0) return 1.0;
  // At least a sliver: a node that owns nothing still gets a valid (tiny) cache.
  return std::max(1e-6, static_cast<double>(plan.bytes[static_cast<size_t>(node)]) / static_cast<double>(all));
}

uint64_t numa_place_dense(const Model& model, const NumaTopology& topo, NumaMode mode) {
  std::vector<int> nodes;
  for (const NumaNode& n : topo.nodes)
    if (std::find(nodes.begin(), nodes.end(), n.mem_node) == nodes.end()) nodes.push_back(n.mem_node);
  uint64_t bytes = 0;
  const auto ranges = dense_ranges(model);
  for (size_t p = 0; p < ranges.size(); ++p) {
    const GgufFile& part = *model.gguf().parts()[p];
    for (const auto& [b, e] : ranges[p]) {
      const std::string what = fmt::format("the dense weights of {} at offset {}", part.path, b);
      if (mode == NumaMode::Interleave) numa_interleave(part.base + b, e - b, nodes, what);
      else numa_bind(part.base + b, e - b, topo.nodes[0].mem_node, what);
      bytes += e - b;
    }
  }
  return bytes;
}

namespace {

// Spins before a handoff sleeps (as ThreadPool's workers do): a layer's job and its answer are
// microseconds apart when the nodes keep up.
constexpr int kHandoffSpins = 4096;

// Waits until a.load() != seen (spinning first, then atomic wait); returns the new value.
uint32_t await_change(const std::atomic<uint32_t>& a, uint32_t seen) {
  uint32_t v;
  for (int spin = 0; (v = a.load(std::memory_order_acquire)) == seen; ++spin) {
    if (spin < kHandoffSpins) spin_pause();
    else a.wait(seen, std::memory_order_acquire);
  }
  return v;
}

}  // namespace

// One node's shard: a thread pinned to the node's CPUs that waits for a job, computes it with
// Model::run_routed (its own pool, scratch and expert provider) and signals it done. The handoff is
// two generation counters: claim() bumps `posted`, the thread sets `done` to it when the job is
// computed (its results, counters and error written before, read by the engine's thread after).
struct NumaShards::Shard {
  int node = 0;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<ExpertStore> store;
  std::unique_ptr<ExpertCache> cache;
  std::unique_ptr<MappedExperts> mapped;
  std::unique_ptr<RoutedWorker> worker;
  std::thread thread;
  std::atomic<uint32_t> posted{0}, done{0};
  std::atomic<uint32_t> started{0};  // 1: the thread's set-up ended (error holds its failure)
  std::atomic<bool> stop{false};
  std::exception_ptr error;  // the set-up's or the last job's
  // The job (written by claim while the thread is idle; read by it while busy).
  std::vector<int32_t> pairs;  // indices into st.tok_of / st.slot_of
  std::vector<uint8_t> mark;   // [n] the token has a pair here
  std::vector<int32_t> ints;   // tok[n_tok], pair_tok, pair_slot, pair_exp [n_pairs] each
  std::vector<float> pw, rows, out;
  RoutedJob job;
  NumaNodeStats st;

  bool idle() const { return done.load(std::memory_order_acquire) == posted.load(std::memory_order_relaxed); }

  void set_up(Engine& eng, const NumaNode& n, uint64_t cache_bytes, int64_t max_experts) {
    numa_pin_thread(n.pin_cpus);  // the pool's workers and the cache's threads start here: they inherit it
    pool = std::make_unique<ThreadPool>(std::max(1, static_cast<int>(n.pin_cpus.size())));
    Model& m = eng.model();
    ExpertProvider* provider = nullptr;
    if (cache_bytes > 0) {
      store = std::make_unique<ExpertStore>(expert_layout(m.gguf(), m.config(), m.weights()));
      const TierOptions& to = eng.options().tier;
      IoOptions io;
      io.queue_depth = to.queue_depth;
      io.force_pread = to.force_pread;
      ExpertCacheOptions co;
      co.cache_bytes = cache_bytes;
      co.max_experts = max_experts;
      co.policy = to.policy;
      co.mlock = to.mlock;
      cache = std::make_unique<ExpertCache>(*store, make_io_backend(store->files(), io), co);
      numa_bind(cache->arena(), cache->arena_bytes(), n.mem_node, fmt::format("node {}'s expert cache", node));
      provider = cache.get();
    } else {
      mapped = std::make_unique<MappedExperts>(m.weights());
      provider = mapped.get();
    }
    worker = m.make_routed_worker(eng.kv(), eng.options().n_batch, pool.get(), provider);
  }

  void run(Engine& eng, const NumaNode& n, uint64_t cache_bytes, int64_t max_experts) {
    try {
      set_up(eng, n, cache_bytes, max_experts);
    } catch (...) {
      error = std::current_exception();
    }
    started.store(1, std::memory_order_release);
    started.notify_all();
    if (error) return;
    for (uint32_t seen = 0;;) {
      seen = await_change(posted, seen);
      if (stop.load(std::memory_order_acquire)) return;
      const double t0 = clock_s();
      try {
        eng.model().run_routed(job, eng.kv(), out.data(), *worker);
      } catch (...) {
        error = std::current_exception();
      }
      st.compute_s += clock_s() - t0;
      ++st.jobs;
      st.pairs += static_cast<uint64_t>(job.n_pairs);
      done.store(seen, std::memory_order_release);
      done.notify_one();
    }
  }

  // Waits for the job in flight (if any); rethrows its error.
  void wait() {
    const uint32_t want = posted.load(std::memory_order_relaxed);
    for (uint32_t d = done.load(std::memory_order_acquire); d != want;) d = await_change(done, d);
    if (error) {
      std::exception_ptr e = error;
      error = nullptr;
      std::rethrow_exception(e);
    }
  }

  // Packs the pairs of this layer into the job (rows from st.xn) and wakes the thread.
  void start(FwdCtx& c, int layer) {
    auto& s = c.st;
    const int n = c.b.n, d = c.cfg.n_embd, k = c.cfg.layers[layer].n_expert_used;
    const int np = static_cast<int>(pairs.size());
    mark.assign(static_cast<size_t>(n), 0);
    for (int q : pairs) mark[s.tok_of[q]] = 1;
    int n_tok = 0;
    for (int i = 0; i < n; ++i) n_tok += mark[i];
    ints.resize(static_cast<size_t>(n_tok) + 3 * static_cast<size_t>(np));
    pw.resize(static_cast<size_t>(np));
    rows.resize(static_cast<size_t>(n_tok) * d);
    out.resize(static_cast<size_t>(np) * d);
    int32_t* tok = ints.data();
    int32_t *ptok = tok + n_tok, *pslot = ptok + np, *pexp = pslot + np;
    for (int i = 0, t = 0; i < n; ++i)
      if (mark[i]) {
        tok[t] = i;
        std::memcpy(rows.data() + static_cast<size_t>(t) * d, s.xn.data() + static_cast<size_t>(i) * d, sizeof(float) * d);
        ++t;
      }
    for (int j = 0; j < np; ++j) {
      const int q = pairs[j];
      const size_t at = static_cast<size_t>(s.tok_of[q]) * k + s.slot_of[q];
      ptok[j] = s.tok_of[q];
      pslot[j] = s.slot_of[q];
      pexp[j] = s.sel[at];
      pw[j] = s.sel_w[at];
    }
    job = RoutedJob{layer, n, n_tok, tok, rows.data(), np, ptok, pslot, pexp, pw.data()};
    posted.fetch_add(1, std::memory_order_release);
    posted.notify_one();
  }

  void shut() {
    stop.store(true, std::memory_order_release);
    posted.fetch_add(1, std::memory_order_release);
    posted.notify_one();
    if (thread.joinable()) thread.join();
  }
};

NumaShards::NumaShards(Engine& eng, NumaTopology topo, EpPlan plan) : eng_(eng), topo_(std::move(topo)), plan_(std::move(plan)) {
  STRATA_CHECK(plan_.ranks == topo_.size(), "--numa shard: a plan for {} ranks on {} nodes", plan_.ranks, topo_.size());
  // Node 0: the engine's pool (the caller is its thread 0).
  const std::vector<int>& cpus0 = topo_.nodes[0].pin_cpus;
  eng_.pool().run([&](int) { numa_pin_thread(cpus0); });
  numa_pin_thread(cpus0);
  const MemoryPlan& mp = eng_.tier().plan();
  const bool streaming = mp.streaming && !mp.loading;
  const int64_t cap = eng_.options().tier.cache_experts;
  try {
    for (int r = 1; r < topo_.size(); ++r) {
      auto s = std::make_unique<Shard>();
      s->node = r;
      const double share = share_of_node(plan_, r);
      const uint64_t bytes = streaming ? std::max<uint64_t>(1, share_of(mp.experts_budget, share)) : 0;
      const int64_t max_experts = cap > 0 ? std::max<int64_t>(1, std::llround(static_cast<double>(cap) * share)) : 0;
      Shard* sp = s.get();
      const NumaNode node = topo_.nodes[static_cast<size_t>(r)];
      s->thread = std::thread([sp, &eng, node, bytes, max_experts] { sp->run(eng, node, bytes, max_experts); });
      shards_.push_back(std::move(s));
      sp->started.wait(0, std::memory_order_acquire);
      if (sp->error) std::rethrow_exception(sp->error);
    }
  } catch (...) {
    for (auto& s : shards_) s->shut();
    throw;
  }
  if (topo_.size() > 1) eng_.model().set_offload(this);
}

NumaShards::~NumaShards() {
  if (topo_.size() > 1) eng_.model().set_offload(nullptr);
  for (auto& s : shards_) s->shut();
}

void NumaShards::claim(FwdCtx& c, int layer, const ExpertGroups& g, uint8_t* away) {
  if (shards_.empty() || layer >= plan_.n_layer) return;
  for (auto& s : shards_) {
    try {
      s->wait();  // a pass that failed between claim and finish left a job running
    } catch (const std::exception&) {
    }
    s->pairs.clear();
  }
  plan_.claim_remote(layer, c.cfg.layers[layer].n_expert, g.counts, g.starts, away, ExpertOffload::kAway,
                     [&](int o, int q) { shards_[static_cast<size_t>(o - 1)]->pairs.push_back(q); });
  for (auto& s : shards_)
    if (!s->pairs.empty()) s->start(c, layer);
}

void NumaShards::finish(FwdCtx& c, int layer, const ExpertGroups&, const uint8_t*) {
  if (shards_.empty() || layer >= plan_.n_layer) return;
  const double t0 = clock_s();
  for (auto& s : shards_) {
    if (s->pairs.empty()) continue;
    try {
      s->wait();
    } catch (const std::exception& e) {
      s->pairs.clear();
      fail("--numa shard: node {} failed on MoE layer {}: {}", s->node, layer, e.what());
    }
  }
  wait_s_ += clock_s() - t0;
  auto& st = c.st;
  const int d = c.cfg.n_embd, k = c.cfg.layers[layer].n_expert_used;
  for (auto& s : shards_) {
    for (size_t j = 0; j < s->pairs.size(); ++j) {
      const int q = s->pairs[j];
      std::memcpy(st.slots.data() + (static_cast<size_t>(st.tok_of[q]) * k + st.slot_of[q]) * d, s->out.data() + j * d, sizeof(float) * d);
    }
    s->pairs.clear();
  }
}

bool NumaShards::holds(int layer, int e) const { return !shards_.empty() && layer < plan_.n_layer && plan_.owner_of(layer, e) > 0; }

const uint8_t* NumaShards::arena(int node) const {
  if (node <= 0 || node > static_cast<int>(shards_.size())) return nullptr;
  const Shard& s = *shards_[static_cast<size_t>(node - 1)];
  return s.cache ? s.cache->arena() : nullptr;
}

uint64_t NumaShards::arena_bytes(int node) const {
  if (node <= 0 || node > static_cast<int>(shards_.size())) return 0;
  const Shard& s = *shards_[static_cast<size_t>(node - 1)];
  return s.cache ? s.cache->arena_bytes() : 0;
}

std::vector<NumaNodeStats> NumaShards::stats() const {
  std::vector<NumaNodeStats> v(static_cast<size_t>(topo_.size()));
  for (int r = 0; r < topo_.size(); ++r) {
    NumaNodeStats& x = v[static_cast<size_t>(r)];
    x.node = r;
    x.experts = plan_.experts[static_cast<size_t>(r)];
    x.expert_bytes = plan_.bytes[static_cast<size_t>(r)];
  }
  NumaNodeStats& n0 = v[0];
  const ExpertCacheCounters k = eng_.tier().counters();
  n0.hits = k.hits, n0.misses = k.misses, n0.bytes_read = k.bytes_read, n0.io_wait_s = k.wait_s;
  n0.cache_bytes = eng_.tier().plan().expert_cache;
  n0.wait_s = wait_s_;
  double layers = 0;
  for (double s : eng_.model().layer_seconds()) layers += s;
  n0.compute_s = std::max(0.0, layers - n0.wait_s - n0.io_wait_s);
  for (const auto& sp : shards_) {
    const Shard& s = *sp;
    if (!s.idle()) continue;  // the counters are the thread's while it computes (between passes it never does)
    NumaNodeStats& x = v[static_cast<size_t>(s.node)];
    x.jobs = s.st.jobs, x.pairs = s.st.pairs, x.compute_s = s.st.compute_s;
    if (s.cache) {
      const ExpertCacheCounters& c = s.cache->counters();
      x.hits = c.hits, x.misses = c.misses, x.bytes_read = c.bytes_read, x.io_wait_s = c.wait_s;
      x.cache_bytes = s.cache->arena_bytes();
    }
  }
  return v;
}

std::string NumaShards::describe() const {
  std::string s = "numa shard: " + topo_.describe() + "\n";
  for (const NumaNodeStats& x : stats()) {
    const NumaNode& n = topo_.nodes[static_cast<size_t>(x.node)];
    const std::string scratch =
        x.node > 0 ? fmt::format("; scratch {} (outside the memory plan)", format_bytes(shards_[static_cast<size_t>(x.node - 1)]->worker->scratch_bytes())) : "";
    s += fmt::format("  node {}: {} threads, {} routed experts ({}), {}{}\n", x.node, x.node == 0 ? eng_.pool().size() : static_cast<int>(n.pin_cpus.size()),
                     x.experts, format_bytes(x.expert_bytes),
                     x.cache_bytes ? fmt::format("expert cache {} bound to memory node {}", format_bytes(x.cache_bytes), n.mem_node)
                                   : std::string("experts resident (views of the mapped file)"),
                     scratch);
  }
  return s;
}

std::string NumaShards::report() const {
  std::string s = fmt::format("numa shard: {} nodes\n", topo_.size());
  for (const NumaNodeStats& x : stats()) {
    const uint64_t acc = x.hits + x.misses;
    s += fmt::format("  node {}: {} experts; {} jobs ({} rows); hit rate {}, read {}; compute {:.3f} s, I/O wait {:.3f} s", x.node, x.experts, x.jobs,
                     x.pairs, acc ? fmt::format("{:.1f}%", 100.0 * x.hits / acc) : "n/a (resident)", format_bytes(x.bytes_read), x.compute_s,
                     x.io_wait_s);
    if (x.node == 0) s += fmt::format(", waiting for the other nodes {:.3f} s", x.wait_s);
    s += "\n";
  }
  return s;
}

}  // namespace strata
