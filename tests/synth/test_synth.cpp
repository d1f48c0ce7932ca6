// strata synth: tiny presets round-trip through the GGUF reader, ModelSummary and Model::load +
// forward; determinism; valid blocks; router skew concentrates routing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <unistd.h>
#include <cstring>
#include <cstddef>
#include <set>
#include <unordered_set>

#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "gguf/gguf_file.h"
#include "kernels/blocks.h"
#include "kernels/quants.h"
#include "model/model.h"
#include "model/model_summary.h"
#include "synth/synth.h"
#include "synth/synth_blocks.h"
#include "synth/synth_vocab.h"

using namespace strata;

namespace {

std::string tmp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("strata-synth-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

// Removes this process's scratch folder when the test run ends.
struct ScratchCleanup : ::testing::Environment {
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(std::filesystem::temp_directory_path() / ("strata-synth-test-" + std::to_string(::getpid())), ec);
  }
};
[[maybe_unused]] ::testing::Environment* const kScratchCleanup = ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

std::string read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The forward pass needs the scalar reference formats registered (kernels/scalar).
bool can_compute(const SynthSpec& s) {
  for (GgmlType t : {GgmlType::F32, s.expert_type, s.attn_type, s.embd_type, s.output_type, s.shexp_type, GgmlType::Q8_0, GgmlType::F16})
    if (!has_dequantize(t)) return false;
  return true;
}
#define REQUIRE_KERNELS(spec) ASSERT_TRUE(can_compute(spec)) << "a weight format of the spec has no reference dequantization in kernels/scalar"

uint64_t row_bytes(GgmlType t, int n) { return ggml_row_size(t, static_cast<uint64_t>(n)); }

// Bytes expected from the spec alone (independent of synth_plan).
struct SynthExpected {
  uint64_t routed = 0, dense = 0;
  int64_t tensors = 0;
};
SynthExpected expected_bytes(const SynthSpec& s) {
  SynthExpected e;
  const int n = s.n_embd;
  // llama.cpp's fallbacks for rows that do not split into 256-value blocks.
  auto fit = [](GgmlType t, int ne0) {
    if (ne0 % ggml_info(t).block_size == 0) return t;
    return t == GgmlType::Q4_K ? GgmlType::Q5_0 : t == GgmlType::Q6_K ? GgmlType::Q8_0 : GgmlType::IQ4_NL;
  };
  e.dense += row_bytes(s.embd_type, n) * s.n_vocab + row_bytes(s.output_type, n) * s.n_vocab + 4ull * n;
  e.tensors += 3;
  int moe_layers = s.n_layer;
  if (s.arch == SynthArch::Qwen3Moe) {
    const int q = s.n_head * s.head_dim, kv = s.n_head_kv * s.head_dim;
    e.dense += s.n_layer * (row_bytes(s.attn_type, n) * (q + 2ull * kv) + row_bytes(s.attn_type, q) * n + 4ull * (2 * n + 2 * s.head_dim));
    e.tensors += s.n_layer * 8;
  } else {
    const int H = s.n_head, qh = s.qk_nope + s.qk_rope;
    // q: attn_q [n -> H*qh], or with a q latent attn_q_a [n -> q_lora], its norm, attn_q_b [q_lora -> H*qh]
    const uint64_t q = s.q_lora > 0 ? row_bytes(s.attn_type, n) * s.q_lora + 4ull * s.q_lora + row_bytes(s.attn_type, s.q_lora) * H * qh
                                    : row_bytes(s.attn_type, n) * H * qh;
    const uint64_t attn = q + row_bytes(s.attn_type, n) * static_cast<uint64_t>(s.kv_lora + s.qk_rope) +
                          row_bytes(fit(s.attn_type, s.qk_nope), s.qk_nope) * s.kv_lora * H + row_bytes(s.attn_type, s.kv_lora) * s.v_head * H +
                          row_bytes(s.attn_type, H * s.v_head) * n + 4ull * (2 * n + s.kv_lora);
    e.dense += s.n_layer * attn;
    e.tensors += s.n_layer * (s.q_lora > 0 ? 10 : 8);
    moe_layers = s.n_layer - s.n_dense_lead;
    e.dense += s.n_dense_lead * (2 * row_bytes(s.shexp_type, n) * s.n_ff + row_bytes(s.shexp_type, s.n_ff) * n);
    e.tensors += s.n_dense_lead * 3;
    const int sh = s.n_ff_exp * s.n_shared;
    e.dense += moe_layers * (2 * row_bytes(s.shexp_type, n) * sh + row_bytes(s.shexp_type, sh) * n);
    e.tensors += moe_layers * 3;
    if (s.sigmoid_gating) {  // the selection bias exp_probs_b
      e.dense += moe_layers * 4ull * s.n_expert;
      e.tensors += moe_layers;
    }
    if (s.arch == SynthArch::Deepseek32) {  // indexer: q_b, attn_k, k_norm weight + bias, proj
      const uint64_t I = static_cast<uint64_t>(s.idx_heads), D = static_cast<uint64_t>(s.idx_dim);
      e.dense += s.n_layer * (row_bytes(s.attn_type, s.q_lora) * I * D + row_bytes(s.attn_type, n) * (D + I) + 4ull * 2 * D);
      e.tensors += s.n_layer * 5;
    }
  }
  e.dense += moe_layers * 4ull * n * s.n_expert;  // router
  e.routed = moe_layers * static_cast<uint64_t>(s.n_expert) * (2 * row_bytes(s.expert_type, n) * s.n_ff_exp + row_bytes(s.expert_type, s.n_ff_exp) * n);
  e.tensors += moe_layers * 4;
  return e;
}

class SynthArchTest : public ::testing::TestWithParam<const char*> {};

TEST_P(SynthArchTest, RoundTripsThroughReaderAndSummary) {
  const SynthSpec s = synth_preset(GetParam());
  const std::string path = tmp_path(std::string(GetParam()) + ".gguf");
  const SynthResult r = synth_write(s, path, 2);
  auto m = GgufModel::open(path);
  const ModelSummary sum = ModelSummary::of(*m);
  const SynthExpected e = expected_bytes(s);
  EXPECT_EQ(sum.n_tensors, e.tensors);
  EXPECT_EQ(r.n_tensors, e.tensors);
  EXPECT_EQ(sum.routed_bytes, e.routed);
  EXPECT_EQ(sum.dense_bytes, e.dense);
  EXPECT_EQ(r.tensor_bytes, e.routed + e.dense);
  EXPECT_EQ(sum.file_bytes, r.file_bytes);
  EXPECT_EQ(sum.hp.arch, synth_arch_name(s.arch));
  EXPECT_EQ(sum.hp.n_layer, s.n_layer);
  EXPECT_EQ(sum.hp.n_embd, s.n_embd);
  EXPECT_EQ(sum.hp.n_expert, s.n_expert);
  EXPECT_EQ(sum.hp.n_expert_used, s.n_expert_used);
  EXPECT_EQ(sum.hp.n_ff_exp, s.n_ff_exp);
  EXPECT_EQ(sum.n_routed_experts, static_cast<int64_t>(s.n_expert) * (s.n_layer - s.n_dense_lead));
  // Tokenizer: n_vocab tokens, merges reference existing tokens and produce tokens.
  const GgufValue* toks = m->find("tokenizer.ggml.tokens");
  ASSERT_TRUE(toks && toks->is_array());
  EXPECT_EQ(toks->count, static_cast<uint64_t>(s.n_vocab));
  const SynthVocab v = synth_vocab(s.arch, s.n_vocab, s.seed);
  std::unordered_set<std::string> have(v.tokens.begin(), v.tokens.end());
  EXPECT_EQ(have.size(), v.tokens.size()) << "duplicate tokens";
  for (const auto& mg : v.merges) {
    const auto sp = mg.find(' ');
    ASSERT_NE(sp, std::string::npos);
    const std::string a = mg.substr(0, sp), b = mg.substr(sp + 1);
    ASSERT_TRUE(have.count(a) && have.count(b) && have.count(a + b)) << mg;
  }
  EXPECT_EQ(m->get_string("tokenizer.ggml.model").value_or(""), "gpt2");
  EXPECT_EQ(m->get_int("tokenizer.ggml.eos_token_id").value_or(-1), v.eos);
  std::filesystem::remove(path);
}

class SynthForwardTest : public ::testing::TestWithParam<const char*> {};

TEST_P(SynthForwardTest, LoadsAndRunsForward) {
  const SynthSpec s = synth_preset(GetParam());
  REQUIRE_KERNELS(s);
  const std::string path = tmp_path(std::string(GetParam()) + "-fwd.gguf");
  synth_write(s, path, 2);
  auto model = Model::load(path);
  EXPECT_EQ(model->config().n_layer, s.n_layer);
  ThreadPool pool(2);
  model->set_threads(&pool);
  KvCacheOptions ko;
  ko.n_ctx = 64;
  KvCache kv(model->config(), ko);
  std::vector<int32_t> toks, pos;
  for (int i = 0; i < 16; ++i) toks.push_back(300 + 7 * i), pos.push_back(i);
  Batch b;
  b.n = 16;
  b.tokens = toks.data();
  b.pos = pos.data();
  std::vector<float> logits(static_cast<size_t>(s.n_vocab));
  model->forward(b, kv, logits.data());
  double sum = 0, sq = 0;
  for (float x : logits) {
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sq += static_cast<double>(x) * x;
  }
  const double mean = sum / s.n_vocab, sd = std::sqrt(sq / s.n_vocab - mean * mean);
  EXPECT_GT(sd, 0.05);  // activations neither vanished...
  EXPECT_LT(sd, 50.0);  // ...nor blew up
  std::printf("[%s] logits mean %.3f std %.3f\n", GetParam(), mean, sd);
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Presets, SynthArchTest, ::testing::Values("tiny", "tiny-deepseek2", "tiny-deepseek32"));
INSTANTIATE_TEST_SUITE_P(Presets, SynthForwardTest, ::testing::Values("tiny", "tiny-deepseek2", "tiny-deepseek32", "tiny-glm4moe", "tiny-minimax-m2"));

// The deepseek-v3.2 preset has DeepSeek-V3.2's shape (planned, not written: hundreds of GB), and
// its metadata loads as a deepseek32 model with that configuration (the tiny preset, written).
TEST(Synth, DeepseekV32PresetHasTheRealShape) {
  const SynthSpec s = synth_preset("deepseek-v3.2");
  EXPECT_EQ(s.arch, SynthArch::Deepseek32);
  EXPECT_EQ(s.n_layer, 61);
  EXPECT_EQ(s.n_embd, 7168);
  EXPECT_EQ(s.n_expert, 256);
  EXPECT_EQ(s.n_expert_used, 8);
  EXPECT_EQ(s.idx_heads, 64);
  EXPECT_EQ(s.idx_dim, 128);
  EXPECT_EQ(s.idx_topk, 2048);
  const auto plan = synth_plan(s);
  EXPECT_EQ(static_cast<int64_t>(plan.size()), expected_bytes(s).tensors);
  uint64_t routed = 0;
  for (const auto& t : plan) {
    if (t.name.find("_exps.") != std::string::npos) routed += t.nbytes();
    if (t.name == "blk.60.indexer.attn_q_b.weight") {
      EXPECT_EQ(t.ne, (std::vector<uint64_t>{1536, 64 * 128}));
    }
  }
  EXPECT_EQ(routed, expected_bytes(s).routed);
  EXPECT_GT(routed, 300ull << 30);  // 671B-class: ~360 GiB of Q4_K routed experts

  const SynthSpec t = synth_preset("tiny-deepseek32");
  const std::string path = tmp_path("tiny-deepseek32-cfg.gguf");
  synth_write(t, path, 2);
  auto model = Model::load(path);
  const LayerConfig& l = model->config().layers[2];
  EXPECT_EQ(l.attn, AttnKind::MlaSparse);
  EXPECT_EQ(l.idx_n_head, t.idx_heads);
  EXPECT_EQ(l.idx_head_dim, t.idx_dim);
  EXPECT_EQ(l.idx_top_k, t.idx_topk);
  EXPECT_EQ(l.n_group, t.n_group);
  EXPECT_EQ(l.gating, GatingFunc::Sigmoid);
  EXPECT_TRUE(l.exp_probs_bias);
  std::filesystem::remove(path);
}

TEST(Synth, DeterministicInSeedAndThreads) {
  SynthSpec s = synth_preset("tiny");
  const std::string a = tmp_path("det-a.gguf"), b = tmp_path("det-b.gguf"), c = tmp_path("det-c.gguf");
  synth_write(s, a, 1);
  synth_write(s, b, 2);
  s.seed += 1;
  synth_write(s, c, 2);
  const std::string da = read_all(a), db = read_all(b), dc = read_all(c);
  EXPECT_EQ(da.size(), db.size());
  EXPECT_TRUE(da == db) << "same seed must give identical bytes (whatever the thread count)";
  EXPECT_FALSE(da == dc) << "another seed must change the weights";
  for (const auto& p : {a, b, c}) std::filesystem::remove(p);
}

TEST(Synth, RejectsBadSpecs) {
  SynthSpec s = synth_preset("tiny");
  s.n_expert_used = s.n_expert + 1;
  EXPECT_THROW(s.validate(), Error);
  s = synth_preset("tiny");
  s.expert_type = GgmlType::Q8_K;  // an activation type: no weight generator
  EXPECT_THROW(s.validate(), Error);
  s = synth_preset("tiny");
  s.n_embd = 300;
  EXPECT_THROW(s.validate(), Error);
  EXPECT_THROW(synth_preset("no-such-model"), Error);
}

TEST(Synth, PresetShapes) {
  // qwen3-30b-a3b is ~17 GB at Q4_K; the demo model is ~60-120 MB.
  auto total = [](const SynthSpec& s) {
    uint64_t b = 0;
    for (const auto& t : synth_plan(s)) b += t.nbytes();
    return b;
  };
  const uint64_t q = total(synth_preset("qwen3-30b-a3b"));
  EXPECT_GT(q, 16'000'000'000ull);
  EXPECT_LT(q, 19'000'000'000ull);
  const uint64_t d = total(synth_preset("demo"));
  EXPECT_GT(d, 60'000'000ull);
  EXPECT_LT(d, 130'000'000ull);
  const uint64_t ds = total(synth_preset("deepseek-v2-lite"));
  EXPECT_GT(ds, 8'000'000'000ull);
  EXPECT_LT(ds, 12'000'000'000ull);
  for (const auto& t : synth_plan(synth_preset("deepseek-v2-lite")))
    if (t.name == "blk.0.attn_k_b.weight") {
      EXPECT_EQ(t.type, GgmlType::Q5_0) << "128-wide rows cannot hold Q4_K blocks: llama.cpp falls back to Q5_0";
    }
}

// Every random block has finite, non-zero, sensibly small f16 scales.
TEST(Synth, RandomBlocksHaveFiniteScales) {
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_0}) {
    const auto& info = ggml_info(t);
    std::vector<uint8_t> buf(static_cast<size_t>(info.type_size) * 4096);
    const float sigma = 1.0f / std::sqrt(2048.0f);
    synth_fill_random(t, buf.data(), buf.size(), sigma, 42, nullptr);
    for (size_t i = 0; i < 4096; ++i) {
      const uint8_t* blk = buf.data() + i * info.type_size;
      uint16_t d;
      if (t == GgmlType::Q6_K) std::memcpy(&d, blk + offsetof(block_q6_K, d), 2);
      else std::memcpy(&d, blk, 2);  // d leads the other blocks
      const float df = f16_to_f32(d);
      ASSERT_TRUE(std::isfinite(df) && df != 0.0f && std::fabs(df) < 1.0f) << info.name << " block " << i << " d " << df;
      if (t == GgmlType::Q4_K || t == GgmlType::Q5_K) {
        uint16_t dm;
        std::memcpy(&dm, blk + 2, 2);
        ASSERT_TRUE(std::isfinite(f16_to_f32(dm))) << info.name;
      }
    }
    if (!has_dequantize(t)) continue;
    std::vector<float> y(static_cast<size_t>(4096) * info.block_size);
    dequantize_row(t, buf.data(), y.data(), static_cast<int64_t>(y.size()));
    double sum = 0, sq = 0;
    for (float v : y) sum += v, sq += static_cast<double>(v) * v;
    const double mean = sum / y.size(), sd = std::sqrt(sq / y.size() - mean * mean);
    EXPECT_NEAR(sd, sigma, 0.2 * sigma) << info.name;
    EXPECT_LT(std::fabs(mean), 0.05 * sigma) << info.name;
  }
}

// The simple quantizers round-trip through the reference dequantization.
TEST(Synth, QuantizersRoundTrip) {
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::F16}) {
    ASSERT_TRUE(has_dequantize(t)) << ggml_type_name(t) << " has no reference dequantization";
    const int n = 1024;
    std::vector<float> x(n), y(n);
    SynthRng r(7);
    for (auto& v : x) v = r.symmetric() + 0.3f;
    std::vector<uint8_t> q(ggml_row_size(t, n));
    synth_quantize(t, x.data(), q.data(), n);
    dequantize_row(t, q.data(), y.data(), n);
    double err = 0;
    for (int i = 0; i < n; ++i) err = std::max(err, static_cast<double>(std::fabs(x[i] - y[i])));
    const double tol = t == GgmlType::F16 ? 1e-3 : t == GgmlType::Q8_0 ? 0.01 : t == GgmlType::Q6_K ? 0.06 : 0.2;
    EXPECT_LT(err, tol) << ggml_type_name(t);
  }
}

struct CountRoutes : RoutingObserver {
  std::map<int, std::vector<int64_t>> counts;  // layer -> [n_expert]
  int n_expert;
  explicit CountRoutes(int e) : n_expert(e) {}
  void on_route(int layer, int, const int32_t* ids, int k) override {
    auto& c = counts[layer];
    if (c.empty()) c.assign(static_cast<size_t>(n_expert), 0);
    for (int i = 0; i < k; ++i) c[static_cast<size_t>(ids[i])]++;
  }
  // Share of selections taken by the top 10% experts, averaged over layers.
  double top10_share() const {
    double s = 0;
    for (const auto& [l, c] : counts) {
      auto v = c;
      std::sort(v.rbegin(), v.rend());
      const size_t top = std::max<size_t>(1, static_cast<size_t>(std::lround(0.1 * static_cast<double>(v.size()))));
      int64_t t = 0, all = 0;
      for (size_t i = 0; i < v.size(); ++i) (i < top ? t : all) += v[i];
      s += static_cast<double>(t) / static_cast<double>(t + all);
    }
    return s / static_cast<double>(counts.size());
  }
};

double routed_share(double skew, const char* preset) {
  SynthSpec s = synth_preset(preset);
  s.skew = skew;
  const std::string path = tmp_path(std::string("skew-") + preset + std::to_string(skew) + ".gguf");
  synth_write(s, path, 2);
  auto model = Model::load(path);
  ThreadPool pool(2);
  model->set_threads(&pool);
  CountRoutes obs(s.n_expert);
  model->add_routing_observer(&obs);
  const int n = 128;
  KvCacheOptions ko;
  ko.n_ctx = n;
  KvCache kv(model->config(), ko);
  std::vector<int32_t> toks, pos;
  SynthRng r(5);
  for (int i = 0; i < n; ++i) toks.push_back(static_cast<int32_t>(r.next() % static_cast<uint64_t>(s.n_vocab))), pos.push_back(i);
  Batch b;
  b.n = n;
  b.tokens = toks.data();
  b.pos = pos.data();
  std::vector<float> logits(static_cast<size_t>(s.n_vocab));
  model->forward(b, kv, logits.data());
  std::filesystem::remove(path);
  return obs.top10_share();
}

TEST(Synth, SkewConcentratesRouting) {
  for (const char* preset : {"tiny", "tiny-deepseek2"}) {
    REQUIRE_KERNELS(synth_preset(preset));
    const double s0 = routed_share(0.0, preset), s1 = routed_share(1.0, preset);
    std::printf("[%s] top-10%% experts' share of selections: skew 0 -> %.3f, skew 1 -> %.3f\n", preset, s0, s1);
    EXPECT_LT(s0, 0.2);
    EXPECT_GT(s1, s0 + 0.1);
  }
}

}  // namespace

namespace {

TEST(SynthCli, WritesPresetWithOverrides) {
  const std::string out = tmp_path("cli.gguf"), log = tmp_path("cli.log");
  const std::string cmd = std::string(STRATA_BINARY) + " synth --preset tiny --layers 3 --experts 16 --expert-type q5_K --skew 0 --seed 9 --out " + out +
                          " > " + log + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_all(log);
  EXPECT_NE(read_all(log).find("39 tensors"), std::string::npos) << read_all(log);  // 3 + 3 layers x 12
  EXPECT_FALSE(std::filesystem::exists(out + ".tmp"));
  auto m = GgufModel::open(out);
  const ModelSummary s = ModelSummary::of(*m);
  EXPECT_EQ(s.hp.n_layer, 3);
  EXPECT_EQ(s.hp.n_expert, 16);
  EXPECT_EQ(s.types.count("q5_K"), 1u);
  const std::string bad = std::string(STRATA_BINARY) + " synth --preset tiny --expert-type q8_K --out " + out + " > " + log + " 2>&1";
  EXPECT_NE(std::system(bad.c_str()), 0);
  std::filesystem::remove(out);
  std::filesystem::remove(log);
}

}  // namespace

// qwen35moe: the tiny preset loads (every tensor bound with its shape) and runs prompt and decode
// steps with finite, non-degenerate logits; the 35B-A3B preset has that model's shapes and size.
TEST(Synth, Qwen35MoeTinyLoadsAndDecodes) {
  const SynthSpec s = synth_preset("tiny-qwen35moe");
  REQUIRE_KERNELS(s);
  const std::string path = tmp_path("tiny-qwen35moe.gguf");
  synth_write(s, path, 2);
  auto model = Model::load(path);
  const ModelConfig& cfg = model->config();
  ASSERT_EQ(cfg.n_layer, 4);
  for (int l = 0; l < 4; ++l) EXPECT_EQ(cfg.layers[static_cast<size_t>(l)].attn, l == 3 ? AttnKind::Gqa : AttnKind::DeltaNet) << l;
  EXPECT_EQ(cfg.layers[3].rope.n_dims, 16);
  KvCacheOptions ko;
  ko.n_ctx = 64;
  KvCache kv(cfg, ko);
  model->prepare(kv, 16, 1);
  std::vector<float> logits(static_cast<size_t>(s.n_vocab));
  auto pass = [&](int p0, int n) {
    std::vector<int32_t> toks, pos;
    for (int i = 0; i < n; ++i) toks.push_back(300 + 7 * (p0 + i)), pos.push_back(p0 + i);
    Batch b;
    b.n = n;
    b.tokens = toks.data();
    b.pos = pos.data();
    model->forward(b, kv, logits.data());
    double sum = 0, sq = 0;
    for (float x : logits) {
      EXPECT_TRUE(std::isfinite(x));
      sum += x;
      sq += static_cast<double>(x) * x;
    }
    const double mean = sum / s.n_vocab;
    return std::sqrt(sq / s.n_vocab - mean * mean);
  };
  const double sd0 = pass(0, 16);
  EXPECT_GT(sd0, 0.05);
  EXPECT_LT(sd0, 50.0);
  double sd = 0;
  for (int p = 16; p < 48; ++p) sd = pass(p, 1);  // the recurrent state stays bounded (negative ssm_a)
  EXPECT_GT(sd, 0.05);
  EXPECT_LT(sd, 50.0);
  std::filesystem::remove(path);
}

TEST(Synth, Qwen35Moe35bA3bPresetShapes) {
  const SynthSpec s = synth_preset("qwen3.5-35b-a3b");
  uint64_t total = 0, routed = 0;
  std::map<std::string, std::vector<uint64_t>> ne;
  for (const auto& t : synth_plan(s)) {
    total += t.nbytes();
    if (t.name.find("_exps.") != std::string::npos) routed += t.nbytes();
    ne[t.name] = t.ne;
  }
  EXPECT_GT(total, 18'000'000'000ull);  // ~35B parameters at ~4.5 bits
  EXPECT_LT(total, 22'000'000'000ull);
  EXPECT_GT(routed, total * 9 / 10);
  EXPECT_EQ(ne["blk.0.attn_qkv.weight"], (std::vector<uint64_t>{2048, 8192}));   // 2*16*128 + 32*128
  EXPECT_EQ(ne["blk.0.ssm_conv1d.weight"], (std::vector<uint64_t>{4, 8192}));
  EXPECT_EQ(ne["blk.0.ssm_out.weight"], (std::vector<uint64_t>{4096, 2048}));
  EXPECT_EQ(ne["blk.3.attn_q.weight"], (std::vector<uint64_t>{2048, 8192}));     // 16 heads x (256 query + 256 gate)
  EXPECT_EQ(ne["blk.3.attn_k.weight"], (std::vector<uint64_t>{2048, 512}));
  EXPECT_EQ(ne["blk.39.ffn_gate_exps.weight"], (std::vector<uint64_t>{2048, 512, 256}));
  EXPECT_EQ(ne["blk.39.ffn_gate_inp_shexp.weight"], (std::vector<uint64_t>{2048}));
  EXPECT_EQ(ne.count("blk.39.attn_qkv.weight"), 0u);  // block 39 is full attention
  EXPECT_EQ(ne["token_embd.weight"], (std::vector<uint64_t>{2048, 248320}));
}
