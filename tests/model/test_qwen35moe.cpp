// Qwen3.5 MoE's Gated DeltaNet state (model/delta_net.h): fixed in size whatever the position,
// kept per sequence slot beside the KV cache and counted in its bytes, cleared when a sequence
// starts again, never rewound; several slots in one pass give what each gives alone.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "golden_util.h"
#include "model/delta_net.h"
#include "model/model.h"
#include "runtime/engine.h"

using namespace strata;
using namespace strata::test;

namespace {

constexpr const char* kQ35Set = "qwen35moe-q8_0";

std::unique_ptr<Engine> q35_engine(int n_seq, int n_batch = 64, int n_ctx = 256) {
  EngineOptions eo;
  eo.n_ctx = n_ctx;
  eo.n_seq = n_seq;
  eo.n_threads = 2;
  eo.n_batch = n_batch;
  eo.type_k = eo.type_v = GgmlType::F32;
  return std::make_unique<Engine>(Model::load(fixtures_dir() + "/" + kQ35Set + "/model.gguf"), eo);
}

bool have_set() { return std::filesystem::exists(fixtures_dir() + "/" + kQ35Set + "/model.gguf"); }

std::vector<int32_t> random_tokens(int n, int seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = 3 + (seed * 37 + i * 11) % 700;
  return t;
}

const DeltaNetState& state_of(Engine& eng) {
  auto* s = dynamic_cast<const DeltaNetState*>(eng.kv().ext().get());
  if (!s) throw std::runtime_error("no DeltaNet state in the KV cache");
  return *s;
}

}  // namespace

// The per-sequence state of the linear-attention layers has the size of its definition
// ((K-1)*C conv inputs + Hv*S*S state values per layer) from the start, and decoding 200 tokens
// changes neither it nor the cache's bytes; the DeltaNet layers hold no KV rows.
TEST(Qwen35Moe, LinearAttentionStateDoesNotGrowWithPosition) {
  if (!have_set()) STRATA_MISSING_FIXTURE(std::string(kQ35Set) + " (DeltaNet state size)");
  auto eng = q35_engine(2, 16);
  const ModelConfig& cfg = eng->config();
  uint64_t want = 0;
  int n_delta = 0;
  for (int l = 0; l < cfg.n_layer; ++l) {
    const LayerConfig& lc = cfg.layers[static_cast<size_t>(l)];
    if (lc.attn != AttnKind::DeltaNet) {
      EXPECT_GT(eng->kv().k_width(l), 0) << "layer " << l;
      continue;
    }
    ++n_delta;
    EXPECT_EQ(eng->kv().k_width(l), 0) << "layer " << l;
    EXPECT_EQ(eng->kv().v_width(l), 0) << "layer " << l;
    want += (static_cast<uint64_t>(lc.ssm_conv - 1) * lc.ssm_channels() + static_cast<uint64_t>(lc.ssm_v_heads) * lc.ssm_state * lc.ssm_state) *
                sizeof(float) + sizeof(int32_t);
  }
  ASSERT_EQ(n_delta, 3);
  const DeltaNetState& st = state_of(*eng);
  EXPECT_EQ(st.seq_bytes(), want);
  EXPECT_GE(st.bytes(), 2 * want);  // both slots, allocated up front
  const uint64_t kv0 = eng->kv().bytes(), st0 = st.bytes();
  std::vector<float> lg;
  const auto p = random_tokens(20, 1);
  eng->eval(0, p.data(), 20, 0, false, lg);
  int32_t t = p.back();
  for (int pos = 20; pos < 220; ++pos) {
    t = 3 + (t * 7 + pos) % 700;
    eng->eval(0, &t, 1, pos, false, lg);
  }
  EXPECT_EQ(eng->seq_length(0), 220);
  EXPECT_EQ(st.seq_bytes(), want);
  EXPECT_EQ(st.bytes(), st0);
  EXPECT_EQ(eng->kv().bytes(), kv0);
}

// Two sequences in one pass (prompt chunks and decode steps mixed) give bit for bit what each
// gives alone, and a slot that starts a new prompt at position 0 forgets its old state.
TEST(Qwen35Moe, SlotsAreIndependentAndRestartClearsTheState) {
  if (!have_set()) STRATA_MISSING_FIXTURE(std::string(kQ35Set) + " (DeltaNet slots)");
  auto eng = q35_engine(2, 64);
  auto solo = q35_engine(1, 64);
  const auto a = random_tokens(13, 2), b = random_tokens(9, 3), c = random_tokens(11, 4);
  std::vector<float> ref_a, ref_b, both, lg;
  // Alone: a then one decode step; b then one decode step (in a fresh run each).
  solo->eval(0, a.data(), 13, 0, false, ref_a);
  const int32_t ta = 17, tb = 29;
  solo->eval(0, &ta, 1, 13, false, ref_a);
  solo->eval(0, b.data(), 9, 0, false, ref_b);  // restart at 0: the state of a is cleared
  solo->eval(0, &tb, 1, 9, false, ref_b);
  // Together: slot 1 holds c first (a different prefix), then b; slot 0 gets a.
  eng->eval(1, c.data(), 11, 0, false, lg);
  eng->reset(1);
  const SeqInput in[2] = {{0, a.data(), 13, Logits::Last}, {1, b.data(), 9, Logits::Last}};
  eng->forward(in, both);
  const SeqInput step[2] = {{0, &ta, 1, Logits::Last}, {1, &tb, 1, Logits::Last}};
  eng->forward(step, both);
  const size_t nv = static_cast<size_t>(eng->config().n_vocab);
  ASSERT_EQ(both.size(), 2 * nv);
  EXPECT_EQ(std::vector<float>(both.begin(), both.begin() + nv), ref_a);
  EXPECT_EQ(std::vector<float>(both.begin() + nv, both.end()), ref_b);
}

// The recurrent state cannot be rewound: no prefix is reused, cutting a sequence back fails
// naming the architecture.
TEST(Qwen35Moe, RecurrentStateIsNeverRewound) {
  if (!have_set()) STRATA_MISSING_FIXTURE(std::string(kQ35Set) + " (no rewind)");
  auto eng = q35_engine(1, 64);
  EXPECT_FALSE(eng->model().rewindable());
  const auto p = random_tokens(12, 5);
  std::vector<float> lg;
  eng->eval(0, p.data(), 12, 0, false, lg);
  EXPECT_EQ(eng->reusable_rows(0), 0);
  EXPECT_EQ(eng->reusable_prefix(0, p), 0);
  try {
    eng->truncate(0, 5);
    FAIL() << "cut back a qwen35moe sequence";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("qwen35moe"), std::string::npos) << e.what();
  }
}

// Below the engine: the model itself refuses a position its state does not hold, and accepts a
// restart at 0 or the exact continuation.
TEST(Qwen35Moe, ModelRefusesAPositionItsStateDoesNotHold) {
  if (!have_set()) STRATA_MISSING_FIXTURE(std::string(kQ35Set) + " (no rewind)");
  auto model = Model::load(fixtures_dir() + "/" + kQ35Set + "/model.gguf");
  KvCacheOptions ko;
  ko.n_ctx = 64;
  ko.n_seq = 1;
  ko.type_k = ko.type_v = GgmlType::F32;
  KvCache kv(model->config(), ko);
  model->prepare(kv, 8, 1);
  std::vector<float> out(static_cast<size_t>(model->config().n_vocab));
  auto pass_on = [&](KvCache& cache, int32_t p0, int n) {
    std::vector<int32_t> tok(static_cast<size_t>(n)), pos(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) tok[static_cast<size_t>(i)] = 5 + i, pos[static_cast<size_t>(i)] = p0 + i;
    Batch b;
    b.n = n;
    b.tokens = tok.data();
    b.pos = pos.data();
    model->forward(b, cache, out.data());
  };
  auto pass = [&](int32_t p0, int n) { pass_on(kv, p0, n); };
  pass(0, 6);
  pass(6, 2);  // continues
  try {
    pass(4, 2);
    FAIL() << "continued a state of 8 positions at position 4";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be rewound"), std::string::npos) << e.what();
  }
  try {
    pass(9, 1);
    FAIL() << "skipped position 8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("continues at position 9"), std::string::npos) << e.what();
  }
  pass(0, 3);  // a restart is always fine, and forgets the old state
  const std::vector<float> restarted = out;
  KvCache fresh(model->config(), ko);
  model->prepare(fresh, 8, 1);
  pass_on(fresh, 0, 3);
  EXPECT_EQ(restarted, out);
}
