// The expert tier must not change a single bit: streaming with a tiny cache (eviction on every
// token) gives exactly the logits of the resident model, for every fixture, with io_uring and
// with the pread fallback; injected I/O faults are retried or fail cleanly and the engine
// answers the next request correctly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "../model/golden_util.h"
#include "../wait_until.h"
#include "core/error.h"
#include "experts/expert_cache.h"
#include "experts/expert_store.h"
#include "experts/io_backend.h"
#include "experts/cache_sim.h"
#include "model/expert_layout.h"
#include "runtime/engine.h"
#include "runtime/routing_recorder.h"

using namespace strata;
using namespace strata::test;

namespace {

std::unique_ptr<Engine> stream_engine(const std::string& path, const TierOptions& tier) {
  EngineOptions eo;
  eo.n_ctx = 256;
  eo.n_threads = 2;
  eo.n_batch = 64;
  eo.type_k = eo.type_v = GgmlType::F32;
  eo.tier = tier;
  return std::make_unique<Engine>(Model::load(path), eo);
}

// Prompt logits (all positions) followed by 4 greedy steps' logits.
std::vector<float> trace_logits(Engine& eng, const std::vector<int32_t>& prompt) {
  std::vector<float> all, lg;
  eng.eval(0, prompt.data(), static_cast<int>(prompt.size()), 0, true, lg);
  all = lg;
  const int nv = eng.config().n_vocab;
  int pos = static_cast<int>(prompt.size());
  std::vector<float> last(lg.end() - nv, lg.end());
  for (int s = 0; s < 4; ++s) {
    int32_t t = 0;
    for (int v = 1; v < nv; ++v)
      if (last[v] > last[t]) t = v;
    eng.eval(0, &t, 1, pos++, false, lg);
    all.insert(all.end(), lg.begin(), lg.begin() + nv);
    last.assign(lg.begin(), lg.begin() + nv);
  }
  return all;
}

// One token's use of expert e of `layer`: requested, acquired (read if absent), released.
void use_expert(ExpertCache& cache, int layer, int32_t e) {
  cache.begin_batch(1);
  cache.request(layer, &e, 1);
  cache.acquire(layer, e);
  cache.release(layer, e);
}

// The qwen3moe-q8_0 fixture's expert store and its first MoE layer.
struct FixtureStore {
  std::unique_ptr<Model> model = Model::load(fixtures_dir() + "/qwen3moe-q8_0/model.gguf");
  ExpertStore store{expert_layout(model->gguf(), model->config(), model->weights())};
  int layer = first_moe();
  int first_moe() const {
    int l = 0;
    while (!store.is_moe(l)) ++l;
    return l;
  }
};

std::vector<int32_t> golden_prompt(const std::string& set, const char* p = "p2") {
  return read_json(fixtures_dir() + "/" + set + "/golden/" + p + ".json")["prompt_tokens"].get<std::vector<int32_t>>();
}

}  // namespace

TEST(ExpertStreaming, BitIdenticalToResidentForEveryFixture) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (streaming identity test)");
  int checked = 0;
  for (const auto& set : model_sets()) {
    const std::string path = fixtures_dir() + "/" + set + "/model.gguf";
    if (model_unsupported(set)) continue;  // asserted by GoldenSuite
    auto resident = stream_engine(path, TierOptions{});
    const auto& layers = resident->config().layers;
    if (std::none_of(layers.begin(), layers.end(), [](const LayerConfig& l) { return l.n_expert > 0; })) {
      // a dense model (a draft): no expert tier to stream
      EXPECT_EQ(resident->tier().cache(), nullptr) << set;
      continue;
    }
    const auto prompt = golden_prompt(set);
    const auto ref = trace_logits(*resident, prompt);
    for (const bool pread : {false, true}) {
      TierOptions t;
      t.cache_experts = 1;  // every layer evicts on every token
      t.force_pread = pread;
      t.lookahead = pread ? 0 : 2;
      auto streamed = stream_engine(path, t);
      ASSERT_NE(streamed->tier().cache(), nullptr) << set;
      // The io_uring case is io_uring: the backend falls back to pread silently otherwise.
      const std::string& io = streamed->tier().plan().io;
      EXPECT_EQ(io.rfind(pread ? "pread" : "io_uring", 0), 0u) << set << ": " << io;
      const auto got = trace_logits(*streamed, prompt);
      ASSERT_EQ(got.size(), ref.size());
      EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0) << set << (pread ? " (pread)" : " (io_uring)");
      const auto& k = streamed->tier().cache()->counters();
      EXPECT_GT(k.misses, 0u) << set;
      EXPECT_GT(k.bytes_read, 0u) << set;
    }
    ++checked;
  }
  EXPECT_GT(checked, 10);
}

// Layers whose experts differ in size (Q4_K_M puts some ffn_down tensors in Q6_K) get slots
// of their own size: no slot is sized for the largest expert unless it holds one, and the
// answers stay bit-identical while several classes evict.
TEST(ExpertStreaming, SizeClassesForMixedQuantLayers) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (size-class test)");
  int checked = 0;
  for (const auto& set : model_sets()) {
    const std::string path = fixtures_dir() + "/" + set + "/model.gguf";
    TierOptions t;
    t.cache_experts = 6;
    if (model_unsupported(set)) continue;  // asserted by GoldenSuite
    auto streamed = stream_engine(path, t);
    const ExpertCache* cache = streamed->tier().cache();
    if (!cache || cache->n_size_classes() < 2) continue;
    const int nc = cache->n_size_classes();
    int slots = 0;
    uint64_t slot_bytes = 0;
    for (int c = 0; c < nc; ++c) {
      EXPECT_GT(cache->class_slots(c), 0) << set << " class " << c;
      if (c > 0) {
        EXPECT_GT(cache->class_slot_bytes(c), cache->class_slot_bytes(c - 1)) << set;
      }
      slots += cache->class_slots(c);
      slot_bytes += static_cast<uint64_t>(cache->class_slots(c)) * cache->class_slot_bytes(c);
    }
    EXPECT_EQ(slots, 6) << set;
    EXPECT_EQ(cache->n_slots(), 6) << set;
    EXPECT_LT(slot_bytes, 6 * cache->slot_bytes()) << set << ": smaller classes must not take the largest size";
    auto resident = stream_engine(path, TierOptions{});
    const auto& layers = resident->config().layers;
    if (std::none_of(layers.begin(), layers.end(), [](const LayerConfig& l) { return l.n_expert > 0; })) {
      // a dense model (a draft): no expert tier to stream
      EXPECT_EQ(resident->tier().cache(), nullptr) << set;
      continue;
    }
    const auto prompt = golden_prompt(set);
    const auto ref = trace_logits(*resident, prompt);
    const auto got = trace_logits(*streamed, prompt);
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0) << set;
    EXPECT_GT(cache->counters().hits, 0u) << set;
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no fixture has experts of different sizes (qwen3moe-q4_k_m does)";
  std::printf("[size classes] %d fixtures with mixed expert sizes checked\n", checked);
}

TEST(ExpertStreaming, RetriesAbsorbTransientFaults) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (fault test)");
  const std::string set = "qwen3moe-q4_k_m", path = fixtures_dir() + "/" + set + "/model.gguf";
  const auto prompt = golden_prompt(set, "p0");
  const auto ref = trace_logits(*stream_engine(path, TierOptions{}), prompt);
  TierOptions t;
  t.cache_experts = 2;
  t.faults.eio_every = 3;     // every third syscall fails: retries must hide it
  t.faults.short_every = 5;   // and every fifth returns half the bytes
  auto eng = stream_engine(path, t);
  const auto got = trace_logits(*eng, prompt);
  EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0);
}

TEST(ExpertStreaming, PersistentFaultFailsCleanlyThenRecovers) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (fault test)");
  const std::string set = "qwen3moe-q4_k_m", path = fixtures_dir() + "/" + set + "/model.gguf";
  const auto prompt = golden_prompt(set, "p0");
  const auto ref = trace_logits(*stream_engine(path, TierOptions{}), prompt);
  TierOptions t;
  t.cache_experts = 2;
  t.faults.fail_first = 40;  // the device fails for a while
  auto eng = stream_engine(path, t);
  std::vector<float> lg;
  try {
    eng->eval(0, prompt.data(), static_cast<int>(prompt.size()), 0, true, lg);
    FAIL() << "expected an I/O error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("failed after retries"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.gguf"), std::string::npos) << e.what();
  }
  // The same engine answers the next request correctly (the device recovered).
  const auto got = trace_logits(*eng, prompt);
  EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0);
}

// A finished read counts as in flight until it is reaped: callers drain with
// `while (in_flight()) reap(true)` and then reset the ops' owners, so an op left unreaped
// would complete later into a reset entry (the pread pool used to stop counting it as soon as
// its worker finished, and a server crashed after a failed request).
TEST(ExpertIo, FinishedReadsCountUntilReaped) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (io backend test)");
  const std::vector<std::string> files{fixtures_dir() + "/qwen3moe-q4_k_m/model.gguf"};
  std::vector<uint8_t> file(4096 * 2 + 8192);  // the bytes the three reads cover
  {
    std::ifstream f(files[0], std::ios::binary);
    ASSERT_TRUE(f.read(reinterpret_cast<char*>(file.data()), static_cast<std::streamsize>(file.size()))) << files[0];
  }
  IoOptions opt;
  std::vector<std::unique_ptr<IoBackend>> backends;
  backends.push_back(make_pread_backend(files, opt, /*direct=*/false));
  backends.push_back(make_faulty_backend(files, opt, FaultPlan{.eio_every = 0, .short_every = 2, .fail_first = 0}));
  backends.push_back(make_io_backend(files, opt));
  for (auto& io : backends) {
    alignas(4096) static uint8_t buf[3][8192];
    ReadOp ops[3];
    for (int i = 0; i < 3; ++i) {
      for (int k = 0; k < 8192; ++k) buf[i][k] = static_cast<uint8_t>(~file[4096u * i + k]);  // differs from the file everywhere
      ops[i].offset = 4096u * static_cast<uint64_t>(i);
      ops[i].len = ops[i].min_len = 8192;
      ops[i].dst = buf[i];
      io->submit(&ops[i]);
    }
    EXPECT_EQ(io->in_flight(), 3) << io->describe();
    // Wait until every read has landed (its bytes are in its buffer), without reaping any.
    const bool landed = wait_until([&] {
      for (int i = 0; i < 3; ++i)
        if (std::memcmp(buf[i], file.data() + 4096u * i, 8192) != 0) return false;
      return true;
    });
    ASSERT_TRUE(landed) << io->describe() << ": the reads did not land within " << kStuckAfter.count() << " s";
    EXPECT_EQ(io->in_flight(), 3) << io->describe() << ": finished but unreaped reads must still count";
    int got = 0;
    ReadOp* done[8];
    while (io->in_flight() > 0) got += io->reap(done + got, 8 - got, true);
    EXPECT_EQ(got, 3) << io->describe();
    for (int i = 0; i < 3; ++i) EXPECT_EQ(ops[i].result, 8192) << io->describe();
  }
}

namespace {
// A backend whose reads land only when the test says so (then read synchronously with pread).
class HeldBackend final : public IoBackend {
 public:
  explicit HeldBackend(std::vector<std::string> files) : files_(std::move(files)) {}
  std::string describe() const override { return "held (test)"; }
  bool direct() const override { return false; }
  void submit(ReadOp* op) override { held_.push_back(op); }
  int reap(ReadOp** out, int max, bool wait) override {
    if (wait && ready_.empty()) land_all();
    int n = 0;
    while (n < max && !ready_.empty()) {
      out[n++] = ready_.back();
      ready_.pop_back();
    }
    return n;
  }
  int in_flight() const override { return static_cast<int>(held_.size() + ready_.size()); }
  void land_all() {
    for (ReadOp* op : held_) {
      FILE* f = std::fopen(files_[op->file].c_str(), "rb");
      std::fseek(f, static_cast<long>(op->offset), SEEK_SET);
      op->result = static_cast<int64_t>(std::fread(op->dst, 1, op->len, f));
      std::fclose(f);
      ready_.push_back(op);
    }
    held_.clear();
  }

 private:
  std::vector<std::string> files_;
  std::vector<ReadOp*> held_, ready_;
};
}  // namespace

// A prefetched expert that demand takes over before its read lands still frees its share of
// the prefetch window when the read lands (it used to stay counted, and prefetching stalled).
TEST(ExpertStreaming, PrefetchWindowIsReturnedWhenDemandTakesOverARead) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (prefetch window test)");
  auto model = Model::load(fixtures_dir() + "/qwen3moe-q8_0/model.gguf");
  ExpertStore store(expert_layout(model->gguf(), model->config(), model->weights()));
  int layer = 0;
  while (!store.is_moe(layer)) ++layer;
  auto io = std::make_unique<HeldBackend>(store.files());
  HeldBackend* held = io.get();
  ExpertCacheOptions o;
  o.cache_bytes = 64ull << 20;
  o.max_experts = 6;
  o.prefetch_window = align_up(store.layer(layer).slot_bytes, io_align());  // room for one prefetch in flight
  ExpertCache cache(store, std::move(io), o);
  cache.begin_batch(1);
  const int32_t a = 0, b = 1;
  cache.prefetch(layer, &a, 1);
  EXPECT_EQ(cache.counters().prefetch_issued, 1u);
  cache.request(layer, &a, 1);  // demand takes the prefetched expert while its read is in flight
  ExpertMats m;
  EXPECT_FALSE(cache.try_acquire(layer, a, &m));
  held->land_all();
  cache.acquire(layer, a);
  cache.release(layer, a);
  cache.prefetch(layer, &b, 1);  // the window is free again
  EXPECT_EQ(cache.counters().prefetch_issued, 2u);
  held->land_all();
  cache.on_abort();
}

// demote_fresh marks only experts the current batch read into slots; a demoted expert is the
// next victim (LRU would have taken the older one).
TEST(ExpertStreaming, DemoteFreshMarksOnlyThisBatchsReads) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (demote test)");
  const FixtureStore fx;
  const ExpertStore& store = fx.store;
  const int layer = fx.layer;
  ExpertCacheOptions o;
  o.cache_bytes = 64ull << 20;
  o.max_experts = 2;
  o.policy = "lru";
  ExpertCache cache(store, make_pread_backend(store.files(), IoOptions{}, false), o);
  auto use = [&](int32_t e) { use_expert(cache, layer, e); };
  use(0);
  use(1);
  const std::vector<ExpertKey> keys = {{layer, 0}, {layer, 1}};
  EXPECT_EQ(cache.demote_fresh(keys), 1);  // expert 0 was read by an earlier batch
  EXPECT_FALSE(cache.demoted({layer, 0}));
  EXPECT_TRUE(cache.demoted({layer, 1}));
  use(2);  // evicts the demoted 1, not the least recently used 0
  const uint64_t hits = cache.counters().hits;
  use(0);
  EXPECT_EQ(cache.counters().hits, hits + 1);
  use(1);
  EXPECT_EQ(cache.counters().hits, hits + 1);
  cache.on_abort();
}

// grow() adds slots (memory a draft model gave back): what was cached stays cached, and experts
// that would have evicted each other now fit side by side.
TEST(ExpertStreaming, GrowAddsSlotsAndKeepsWhatIsCached) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (grow test)");
  const FixtureStore fx;
  const ExpertStore& store = fx.store;
  const int layer = fx.layer;
  ExpertCacheOptions o;
  o.transient_slots = 2;
  o.policy = "lru";
  ExpertCache probe(store, make_pread_backend(store.files(), IoOptions{}, false), [&] {
    ExpertCacheOptions big = o;
    big.cache_bytes = 64ull << 20;
    return big;
  }());
  ASSERT_EQ(probe.n_size_classes(), 1);
  const uint64_t slot = probe.slot_bytes();
  o.cache_bytes = (2 + 2) * slot;  // two transients, two slots
  ExpertCache cache(store, make_pread_backend(store.files(), IoOptions{}, false), o);
  ASSERT_EQ(cache.n_slots(), 2);
  auto use = [&](int32_t e) { use_expert(cache, layer, e); };
  use(0);
  use(1);
  EXPECT_EQ(cache.grow(slot / 2), 0u);  // not a whole slot
  EXPECT_EQ(cache.grow(3 * slot + slot / 2), 3 * slot);
  EXPECT_EQ(cache.n_slots(), 5);
  cache.wait_populated();  // the new room is faulted in off the pass, after the arena
  uint64_t misses = cache.counters().misses;
  use(0);
  use(1);
  EXPECT_EQ(cache.counters().misses, misses) << "experts cached before grow() stay";
  for (int32_t e = 2; e < 5; ++e) use(e);
  misses = cache.counters().misses;
  for (int32_t e = 0; e < 5; ++e) use(e);
  EXPECT_EQ(cache.counters().misses, misses) << "five experts fit in five slots";
  use(5);
  EXPECT_EQ(cache.counters().misses, misses + 1);
  EXPECT_EQ(cache.prefetch_window(), slot);  // 1/8 of 5 slots, at least one
  ASSERT_EQ(cache.grow(11 * slot), 11 * slot);
  EXPECT_EQ(cache.prefetch_window(), 16 * slot / 8);  // 1/8 of the cache as it is now
  cache.on_abort();
}

// A warm start whose ranked experts did not all fit goes on into the room grow() adds: the next
// pass reads the next ranked ones into the new slots, and using them reads nothing more.
TEST(ExpertStreaming, GrowGoesOnWithTheWarmStart) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (grow test)");
  const FixtureStore fx;
  const int layer = fx.layer;
  ExpertCacheOptions o;
  o.transient_slots = 2;
  o.policy = "lru";
  const uint64_t slot = align_up(fx.store.layer(layer).slot_bytes, io_align());
  o.prefetch_window = 8 * slot;  // the warm start's reads in flight at once
  o.cache_bytes = (2 + 2) * slot;  // two transients, two slots
  ExpertCache cache(fx.store, make_pread_backend(fx.store.files(), IoOptions{}, false), o);
  ASSERT_EQ(cache.n_slots(), 2);
  cache.warm({{layer, 3}, {layer, 2}, {layer, 1}, {layer, 0}});
  EXPECT_EQ(cache.counters().warm_issued, 2u);  // the room there is
  ASSERT_EQ(cache.grow(2 * slot), 2 * slot);
  cache.begin_batch(1);
  EXPECT_EQ(cache.counters().warm_issued, 4u);
  for (int32_t e = 0; e < 4; ++e) use_expert(cache, layer, e);
  EXPECT_EQ(cache.counters().misses, 0u);
  cache.on_abort();
}

// --trace-experts with the router lookahead on: every MoE layer but the last is followed by the
// prediction it made for the next MoE layer (a decode token's prediction has top-k experts),
// and replaying those predictions in cachesim reads ahead what the engine read ahead.
TEST(ExpertStreaming, TraceRecordsLookaheadPredictions) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (lookahead trace test)");
  TierOptions tier;
  tier.cache_experts = 4;
  tier.lookahead = 1;
  auto eng = stream_engine(fixtures_dir() + "/qwen3moe-q8_0/model.gguf", tier);
  const ModelConfig& cfg = eng->config();
  std::vector<int> moe;
  int ne = 0, k = 0;
  for (int l = 0; l < cfg.n_layer; ++l)
    if (cfg.layers[l].ffn == FfnKind::Moe) moe.push_back(l), ne = std::max(ne, cfg.layers[l].n_expert), k = cfg.layers[l].n_expert_used;
  ASSERT_GE(moe.size(), 2u);
  RoutingRecorder rec(cfg.n_layer, ne, "p0");
  eng->model().add_routing_observer(&rec);
  const std::vector<int32_t> prompt = golden_prompt("qwen3moe-q8_0");
  std::vector<float> lg;
  rec.begin(0, Phase::prefill);
  eng->eval(0, prompt.data(), static_cast<int>(prompt.size()), 0, false, lg);
  const int steps = 6;
  for (int s = 0; s < steps; ++s) {
    rec.begin(static_cast<uint32_t>(s), Phase::decode);
    const int32_t tok = 100 + 7 * s;
    eng->eval(0, &tok, 1, static_cast<int>(prompt.size()) + s, false, lg);
  }
  eng->model().remove_routing_observer(&rec);
  const RoutingTrace& t = rec.trace();
  ASSERT_EQ(t.runs.size(), 1u);
  size_t decode_predictions = 0;
  const auto& ev = t.runs[0].events;
  for (size_t i = 0; i < ev.size(); ++i) {
    if (!ev[i].predicted) continue;
    // Right after the route rows of the MoE layer before the predicted one.
    ASSERT_GT(i, 0u);
    ASSERT_FALSE(ev[i - 1].predicted);
    const auto at = std::find(moe.begin(), moe.end(), ev[i].layer);
    ASSERT_NE(at, moe.end());
    ASSERT_NE(at, moe.begin());
    EXPECT_EQ(ev[i - 1].layer, *(at - 1));
    if (ev[i].phase == Phase::decode) {
      ++decode_predictions;
      EXPECT_EQ(ev[i].n, k);
    } else {
      EXPECT_GE(ev[i].n, k);
    }
  }
  EXPECT_EQ(decode_predictions, size_t(steps) * (moe.size() - 1));
  // Replayed at the engine's cache size, the predictions are read ahead and mostly used.
  SimOptions o;
  o.budget.bytes = 4;
  o.replay_predictions = true;
  const SimResult with = simulate(t, trace_shape(t), o, "default");
  o.replay_predictions = false;
  const SimResult without = simulate(t, trace_shape(t), o, "default");
  EXPECT_GT(with.prefetches, 0u);
  EXPECT_EQ(with.accesses, without.accesses);
  EXPECT_EQ(with.accesses, size_t(steps) * moe.size() * size_t(k));
}
