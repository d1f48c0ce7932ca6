// Warm start: the usage statistics file round-trips, every damaged or foreign file is ignored
// (never a crash), concurrent writers leave a valid file, and a run that loads statistics fills
// the cache before its first token (hits on the very first pass; the background fill completes
// before any pass when nothing else runs) without changing a bit.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "../model/golden_util.h"
#include "core/error.h"
#include "experts/warm_stats.h"
#include "runtime/engine.h"

using namespace strata;
using namespace strata::test;
namespace fs = std::filesystem;

namespace {

fs::path scratch_dir(const char* name) {
  const fs::path d = fs::temp_directory_path() / fmt::format("strata-warm-{}-{}", name, ::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

constexpr uint64_t kKey = 0x1234abcd5678ef01ull;

}  // namespace

TEST(WarmStats, RoundTripAndDecayedMerge) {
  const fs::path dir = scratch_dir("roundtrip");
  const std::string path = warm_stats_path(dir.string(), kKey);
  std::vector<double> a(3 * 4, 0.0), b(3 * 4, 0.0);
  a[5] = 8;
  a[11] = 2;
  b[5] = 1;
  b[0] = 4;
  save_warm_stats(path, kKey, 3, 4, a);
  std::string why;
  auto s = load_warm_stats(path, kKey, 3, 4, &why);
  ASSERT_TRUE(s) << why;
  EXPECT_EQ(s->runs, 1u);
  EXPECT_EQ(s->weight, a);
  save_warm_stats(path, kKey, 3, 4, b);
  s = load_warm_stats(path, kKey, 3, 4, &why);
  ASSERT_TRUE(s) << why;
  EXPECT_EQ(s->runs, 2u);
  EXPECT_DOUBLE_EQ(s->weight[5], 8 * kWarmStatsDecay + 1);
  EXPECT_DOUBLE_EQ(s->weight[0], 4);
  EXPECT_DOUBLE_EQ(s->weight[11], 2 * kWarmStatsDecay);
  const auto r = s->ranked();  // 4.5 (1,1), 4 (0,0), 1 (2,3)
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0], (ExpertKey{1, 1}));
  EXPECT_EQ(r[1], (ExpertKey{0, 0}));
  EXPECT_EQ(r[2], (ExpertKey{2, 3}));
  // A missing file: no statistics, no complaint.
  EXPECT_FALSE(load_warm_stats((dir / "absent.warm").string(), kKey, 3, 4, &why));
  EXPECT_TRUE(why.empty()) << why;
  fs::remove_all(dir);
}

// Every truncation, every byte flipped, another model's key, another shape: ignored with a reason.
TEST(WarmStats, DamagedOrForeignFilesAreIgnored) {
  WarmStats s;
  s.model_key = kKey;
  s.n_layer = 2;
  s.n_expert = 3;
  s.runs = 7;
  s.weight = {1, 0, 2.5, 0, 3, 0.25};
  const std::vector<uint8_t> good = serialize_warm_stats(s);
  std::string why;
  ASSERT_TRUE(parse_warm_stats(good, kKey, 2, 3, &why)) << why;
  for (size_t n = 0; n < good.size(); ++n) {
    why.clear();
    EXPECT_FALSE(parse_warm_stats(std::span(good.data(), n), kKey, 2, 3, &why)) << "truncated to " << n;
    EXPECT_FALSE(why.empty());
  }
  for (size_t i = 0; i < good.size(); ++i)
    for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::vector<uint8_t> bad = good;
      bad[i] ^= flip;
      why.clear();
      EXPECT_FALSE(parse_warm_stats(bad, kKey, 2, 3, &why)) << "byte " << i << " ^ " << int(flip);
      EXPECT_FALSE(why.empty());
    }
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  EXPECT_FALSE(parse_warm_stats(longer, kKey, 2, 3, &why));
  EXPECT_FALSE(parse_warm_stats(good, kKey + 1, 2, 3, &why));
  EXPECT_NE(why.find("another model"), std::string::npos) << why;
  EXPECT_FALSE(parse_warm_stats(good, kKey, 3, 2, &why));
  // A damaged file on disk is ignored by load and replaced by the next save.
  const fs::path dir = scratch_dir("damaged");
  const std::string path = warm_stats_path(dir.string(), kKey);
  std::ofstream(path, std::ios::binary) << "STRWARM1 garbage";
  EXPECT_FALSE(load_warm_stats(path, kKey, 2, 3, &why));
  EXPECT_FALSE(why.empty());
  save_warm_stats(path, kKey, 2, 3, s.weight);
  auto back = load_warm_stats(path, kKey, 2, 3, &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->runs, 1u);
  fs::remove_all(dir);
}

// Two writers saving at once never leave a torn or partial file (temporary + rename), and no
// temporary file is left behind.
TEST(WarmStats, ConcurrentWritersLeaveAValidFile) {
  const fs::path dir = scratch_dir("writers");
  const std::string path = warm_stats_path(dir.string(), kKey);
  std::vector<double> counts(4 * 8, 1.0);
  auto writer = [&] {
    for (int i = 0; i < 40; ++i) save_warm_stats(path, kKey, 4, 8, counts);
  };
  std::thread t1(writer), t2(writer);
  for (int i = 0; i < 200; ++i) {  // a reader meanwhile sees either no file or a whole one
    std::string why;
    auto s = load_warm_stats(path, kKey, 4, 8, &why);
    EXPECT_TRUE(s || why.empty()) << why;
  }
  t1.join();
  t2.join();
  std::string why;
  auto s = load_warm_stats(path, kKey, 4, 8, &why);
  ASSERT_TRUE(s) << why;
  EXPECT_EQ(s->runs, 80u);  // writers take turns: none loses another's run
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  fs::remove_all(dir);
}

// A run with statistics from an earlier run fills the cache before its first pass: that pass
// hits (a cold one cannot, with lookahead off), and the logits are those of the cold run.
TEST(WarmStats, WarmFillGivesFirstPassHitsAndSameOutput) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (warm start test)");
  const std::string set = "qwen3moe-q4_k_m", path = fixtures_dir() + "/" + set + "/model.gguf";
  auto prompt = read_json(fixtures_dir() + "/" + set + "/golden/p2.json")["prompt_tokens"].get<std::vector<int32_t>>();
  prompt.resize(8);  // one short pass: within it a cold cache cannot hit (each expert is requested once)
  const fs::path dir = scratch_dir("fill");
  auto run = [&](bool warm, uint64_t* first_hits, ExpertCacheCounters* end) {
    EngineOptions eo;
    eo.n_ctx = 256;
    eo.n_threads = 2;
    eo.n_batch = 64;
    eo.type_k = eo.type_v = GgmlType::F32;
    eo.tier.cache_experts = 24;
    eo.tier.lookahead = 0;
    eo.tier.warm_start = warm;
    eo.tier.stats_dir = dir.string();
    Engine eng(Model::load(path), eo);
    std::vector<float> all, lg;
    eng.eval(0, prompt.data(), static_cast<int>(prompt.size()), 0, true, lg);
    *first_hits = eng.tier().cache()->counters().hits;
    all = lg;
    const int nv = eng.config().n_vocab;
    for (int s = 0, pos = static_cast<int>(prompt.size()); s < 6; ++s, ++pos) {
      const float* last = all.data() + all.size() - nv;
      const int32_t t = static_cast<int32_t>(std::max_element(last, last + nv) - last);
      eng.eval(0, &t, 1, pos, false, lg);
      all.insert(all.end(), lg.begin(), lg.begin() + nv);
    }
    *end = eng.tier().cache()->counters();
    return all;
  };
  uint64_t cold_hits = 0, warm_hits = 0, off_hits = 0;
  ExpertCacheCounters cold_c, warm_c, off_c;
  const auto off = run(false, &off_hits, &off_c);  // warm start off: no file written
  EXPECT_TRUE(fs::is_empty(dir));
  const auto cold = run(true, &cold_hits, &cold_c);  // no statistics yet: cold, writes them
  EXPECT_EQ(cold_hits, 0u);
  EXPECT_EQ(cold_c.warm_issued, 0u);
  EXPECT_FALSE(fs::is_empty(dir));
  const auto warm = run(true, &warm_hits, &warm_c);
  EXPECT_GT(warm_hits, 0u);
  EXPECT_GT(warm_c.warm_issued, 0u);
  EXPECT_GT(warm_c.warm_used, 0u);
  EXPECT_LT(warm_c.misses, cold_c.misses);
  ASSERT_EQ(cold.size(), off.size());
  EXPECT_EQ(std::memcmp(cold.data(), off.data(), off.size() * sizeof(float)), 0);
  ASSERT_EQ(warm.size(), off.size());
  EXPECT_EQ(std::memcmp(warm.data(), off.data(), off.size() * sizeof(float)), 0);
  fs::remove_all(dir);
}

// The fill starts with the cache, on its own thread, before the first pass: with nothing else
// using the cache it reads until every free slot holds a ranked expert, so the first pass finds
// them, and the output is the same bits as a cold run's.
TEST(WarmStats, BackgroundFillCompletesBeforeTheFirstPass) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (warm start test)");
  const std::string set = "qwen3moe-q4_k_m", path = fixtures_dir() + "/" + set + "/model.gguf";
  auto prompt = read_json(fixtures_dir() + "/" + set + "/golden/p1.json")["prompt_tokens"].get<std::vector<int32_t>>();
  const fs::path dir = scratch_dir("background");
  auto run = [&](bool wait_for_fill, ExpertCacheCounters* after_fill, ExpertCacheCounters* after_pass, std::vector<float>* logits) {
    EngineOptions eo;
    eo.n_ctx = 256;
    eo.n_threads = 2;
    eo.type_k = eo.type_v = GgmlType::F32;
    eo.tier.cache_experts = 20;
    eo.tier.lookahead = 0;
    eo.tier.warm_start = true;
    eo.tier.stats_dir = dir.string();
    Engine eng(Model::load(path), eo);
    ExpertCache* cache = eng.tier().cache();
    ASSERT_NE(cache, nullptr);
    if (wait_for_fill)  // a condition the fill thread sets when it has nothing left to read
      while (!cache->warm_thread_done()) std::this_thread::yield();
    *after_fill = cache->counters();  // stops the fill where it is (quiesce)
    eng.eval(0, prompt.data(), static_cast<int>(prompt.size()), 0, true, *logits);
    *after_pass = eng.tier().cache()->counters();
  };
  ExpertCacheCounters cold_c, cold_pass, warm_c, warm_pass;
  std::vector<float> cold, warm;
  run(false, &cold_c, &cold_pass, &cold);  // no statistics yet: writes them
  EXPECT_EQ(cold_c.warm_issued, 0u);
  run(true, &warm_c, &warm_pass, &warm);
  EXPECT_GT(warm_c.warm_issued, 0u);  // read before any pass...
  EXPECT_LE(warm_c.warm_issued, 20u);
  EXPECT_EQ(warm_c.hits + warm_c.misses, 0u);
  EXPECT_EQ(warm_pass.warm_issued, warm_c.warm_issued);  // ...and nothing was left for the passes
  EXPECT_GT(warm_pass.warm_used, 0u);
  EXPECT_LT(warm_pass.misses, cold_pass.misses);
  ASSERT_EQ(warm.size(), cold.size());
  EXPECT_EQ(std::memcmp(warm.data(), cold.data(), cold.size() * sizeof(float)), 0);
  fs::remove_all(dir);
}

// Issue 33: a writer killed between its temporary and the rename leaves "<name>.tmp.<pid>.<n>":
// the next save removes those of dead processes (never a live writer's); a statistics path
// that is a directory is a clear message, not "truncated (0 bytes)".
TEST(WarmStats, OrphanedTemporariesAreRemovedAndADirectoryIsNamed) {
  const fs::path d = scratch_dir("orphans");
  const std::string path = (d / "model.warm").string();
  // A pid that is not running: a child that has exited and been reaped.
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  int st = 0;
  ::waitpid(dead, &st, 0);
  const fs::path orphan = d / fmt::format("model.warm.tmp.{}.0", dead);
  const fs::path live = d / fmt::format("model.warm.tmp.{}.99", ::getpid());
  std::ofstream(orphan) << "partial";
  std::ofstream(live) << "partial";
  const std::vector<double> counts(6, 1.0);
  save_warm_stats(path, kKey, 2, 3, counts);
  EXPECT_FALSE(fs::exists(orphan));
  EXPECT_TRUE(fs::exists(live)) << "a live writer's temporary was removed";
  std::string why;
  EXPECT_TRUE(load_warm_stats(path, kKey, 2, 3, &why)) << why;

  const std::string as_dir = (d / "dir.warm").string();
  fs::create_directories(as_dir);
  EXPECT_FALSE(load_warm_stats(as_dir, kKey, 2, 3, &why));
  EXPECT_NE(why.find("is a directory"), std::string::npos) << why;
  std::string err;
  try {
    save_warm_stats(as_dir, kKey, 2, 3, counts);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("is a directory"), std::string::npos) << err;
  fs::remove_all(d);
}
