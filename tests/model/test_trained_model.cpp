// The trained demo model (models/strata-moe-tiny, issue 18, trained by tools/train/) against
// llama.cpp: the golden files beside the model were written by the peer (llama_tensor_dump,
// tools/train/make_golden.py); when the peer itself is present, a fresh token sequence is also
// compared live. Held to the golden suite's tolerances, not bits: Strata's F32 router product is
// 1-2 ulps off llama.cpp's summation order (docs/ARCHITECTURE.md, "Numerics"), and a trained
// router with 64 experts has near ties that this flips some tokens later, so a Q8_0 file is bit
// for bit only for its first positions (the short prompts' last rows are asserted exact).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <unistd.h>
#include <algorithm>
#include <filesystem>

#include "golden_util.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

using namespace strata;
using namespace strata::test;

namespace {

std::string model_dir(const char* name = "strata-moe-tiny") { return std::string(STRATA_SOURCE_DIR) + "/../models/" + name; }

// The peer's settings (llama_tensor_dump): one batch of up to 256, 2 threads, F32 K/V.
std::unique_ptr<Engine> trained_engine(const std::string& dir = model_dir()) {
  EngineOptions eo;
  eo.n_ctx = 256;
  eo.n_threads = 2;
  eo.n_batch = 256;
  eo.type_k = eo.type_v = GgmlType::F32;
  return std::make_unique<Engine>(Model::load(dir + "/model.gguf"), eo);
}

// The model of `dir` against the golden files the peer wrote beside it (make_golden.py).
void check_peer_golden(const std::string& dir) {
  ASSERT_TRUE(std::filesystem::exists(dir + "/model.gguf")) << "the trained model is committed at " << dir;
  auto eng = trained_engine(dir);
  const int nv = eng->config().n_vocab;
  int prompts = 0, positions = 0, exact_positions = 0, agree = 0, counted = 0;
  double worst_cos = 1, worst_rel = 0;
  for (int i = 0; std::filesystem::exists(dir + "/golden/p" + std::to_string(i) + ".json"); ++i) {
    const std::string p = dir + "/golden/p" + std::to_string(i);
    const auto j = read_json(p + ".json");
    const auto seq = j["tokens"].get<std::vector<int32_t>>();
    const int n_prompt = j["n_prompt"].get<int>();
    const auto gen = j["greedy_tokens"].get<std::vector<int32_t>>();
    const auto ref = read_f32(p + ".last_logits.f32");
    ASSERT_EQ(ref.size(), static_cast<size_t>(nv)) << p;
    ASSERT_EQ(seq.size(), static_cast<size_t>(n_prompt) + gen.size() - 1) << p;
    // The whole sequence in one batch, as llama.cpp evaluated it.
    std::vector<float> all;
    eng->eval(0, seq.data(), static_cast<int>(seq.size()), 0, true, all);
    ASSERT_EQ(all.size(), seq.size() * static_cast<size_t>(nv));
    const float* last = all.data() + static_cast<size_t>(n_prompt - 1) * nv;
    const auto c = compare_logits(last, ref.data(), ref.size());
    EXPECT_GE(c.cosine, 0.999) << p << " last prompt position";
    EXPECT_TRUE(row_difference(last, ref.data(), ref.size()).empty()) << p << " last prompt position (a short prompt: bit for bit)";
    worst_cos = std::min(worst_cos, c.cosine);
    // The recorded top-20 of every position: within 5% of the row's spread (std of its logits).
    const auto& topk = j["topk"];
    ASSERT_EQ(topk.size(), seq.size()) << p;
    for (size_t pos = 0; pos < seq.size(); ++pos) {
      const float* row = all.data() + pos * static_cast<size_t>(nv);
      const double spread = compare_logits(row, row, static_cast<size_t>(nv)).ref_std;
      double worst = 0;
      bool exact = true;
      for (const auto& e : topk[pos]) {
        const float want = static_cast<float>(e[1].get<double>());
        const float got = row[e[0].get<int32_t>()];
        worst = std::max(worst, std::abs(double(got) - want) / spread);
        exact = exact && float_bits(got) == float_bits(want);
      }
      EXPECT_LE(worst, 0.05) << p << " position " << pos << ": top-20 logits off llama.cpp's";
      worst_rel = std::max(worst_rel, worst);
      exact_positions += exact;
      positions++;
    }
    // Greedy: the same token wherever llama.cpp's choice is clear (margin > 0.1, as the suite).
    for (size_t s = 0; s < gen.size(); ++s) {
      const float* row = all.data() + (static_cast<size_t>(n_prompt) - 1 + s) * nv;
      const auto& t = topk[static_cast<size_t>(n_prompt) - 1 + s];
      if (t[0][1].get<double>() - t[1][1].get<double>() <= 0.1) continue;
      counted++;
      agree += Sampler::argmax(row, nv) == gen[s];
    }
    prompts++;
  }
  EXPECT_GE(prompts, 3) << "golden prompts under " << dir << "/golden";
  ASSERT_GT(counted, 0);
  EXPECT_GE(double(agree) / counted, 0.9) << "greedy agreement with llama.cpp where its margin > 0.1";
  std::printf("[%s] %d prompts: last prompt rows worst cosine %.9f; %d positions, %d bit for bit, top-20 worst |d|/std %.2e; "
              "greedy agreement %d/%d\n", std::filesystem::path(dir).filename().c_str(), prompts, worst_cos, positions,
              exact_positions, worst_rel, agree, counted);
}

}  // namespace

TEST(TrainedModel, MatchesPeerGolden) { check_peer_golden(model_dir()); }

// The dense qwen3 draft trained on the same text with the same vocabulary (issues 18, 19).
TEST(TrainedModel, DraftMatchesPeerGolden) { check_peer_golden(model_dir("strata-draft-tiny")); }

// Only in a build configured with -DSTRATA_PEER_DIR=DIR (the peer installed there by
// shared/peer/setup.sh + tools/llama_tensor_dump/build.sh; a build without it has no such test,
// rather than a skipped one): llama.cpp evaluates now a 96-token sequence that is in no golden file, and every row is compared. Held to
// the golden suite's tolerances, not bits: at this batch size the F32 router products
// (ffn_gate_inp, 64 experts) round differently from llama.cpp's (|d| ~2e-7 in the router logits),
// which can flip a near-tied expert choice further on.
#ifdef STRATA_PEER_DIR
TEST(TrainedModel, MatchesPeerLive) {
  const std::string peer = std::string(STRATA_PEER_DIR) + "/llama_tensor_dump";
  ASSERT_TRUE(std::filesystem::exists(peer)) << "configured with STRATA_PEER_DIR but the peer is not installed: " << peer;
  auto eng = trained_engine();
  const int nv = eng->config().n_vocab;
  // 96 ids spread over the vocabulary: ordinary tokens, byte tokens and merges alike.
  std::vector<int32_t> seq;
  std::string ids;
  for (int i = 0; i < 96; ++i) {
    seq.push_back(static_cast<int32_t>((static_cast<uint64_t>(i) * 2654435761u) % 4093u));
    if (i) ids += ',';
    ids += std::to_string(seq.back());
  }
  const auto out = std::filesystem::temp_directory_path() / ("strata-trained-peer-" + std::to_string(::getpid()));
  std::filesystem::create_directories(out);
  const std::string cmd = peer + " --model " + model_dir() + "/model.gguf --tokens " + ids + " --out " + out.string() +
                          " --filter result_output > " + out.string() + "/log.txt 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto ref = read_f32((out / "result_output.f32").string());
  std::filesystem::remove_all(out);
  ASSERT_EQ(ref.size(), seq.size() * static_cast<size_t>(nv));
  std::vector<float> all;
  eng->eval(0, seq.data(), static_cast<int>(seq.size()), 0, true, all);
  double worst = 1;
  int exact = 0, agree = 0, counted = 0;
  for (size_t pos = 0; pos < seq.size(); ++pos) {
    const float* got = all.data() + pos * static_cast<size_t>(nv);
    const float* want = ref.data() + pos * static_cast<size_t>(nv);
    const auto c = compare_logits(got, want, static_cast<size_t>(nv));
    EXPECT_GE(c.cosine, 0.999) << "position " << pos;
    worst = std::min(worst, c.cosine);
    exact += row_difference(got, want, static_cast<size_t>(nv)).empty();
    std::vector<float> sorted(want, want + nv);
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    if (sorted[0] - sorted[1] > 0.1f) {
      counted++;
      agree += Sampler::argmax(got, nv) == Sampler::argmax(want, nv);
    }
  }
  ASSERT_GT(counted, 0);
  EXPECT_GE(double(agree) / counted, 0.9) << "top-1 agreement where llama.cpp's margin > 0.1";
  std::printf("[strata-moe-tiny] live peer: %zu positions, %d bit for bit, worst cosine %.9f, top-1 agreement %d/%d\n", seq.size(), exact, worst,
              agree, counted);
}
#endif  // STRATA_PEER_DIR
