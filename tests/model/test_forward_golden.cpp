// The golden suite: every model fixture set (folder from STRATA_FIXTURES, default
// ../shared/fixtures) against llama.cpp's outputs, with the tolerances of the forward-pass
// issue. Reports the worst case per set.
#include <gtest/gtest.h>
#include <gtest/gtest-spi.h>

#include <cmath>

#include "core/error.h"
#include "core/thread_pool.h"
#include "golden_util.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

using namespace strata;
using namespace strata::test;

namespace {

enum class Tier { Float, Q8, Low };

Tier tier_of(const GgufModel& g) {
  const int64_t ft = g.get_int("general.file_type").value_or(-1);
  if (ft == 0 || ft == 1 || ft == 32) return Tier::Float;
  if (ft == 7) return Tier::Q8;
  return Tier::Low;
}

std::unique_ptr<Engine> make_engine(const std::string& path) {
  EngineOptions eo;
  eo.n_ctx = 256;
  eo.n_threads = 2;
  eo.n_batch = 256;
  eo.type_k = eo.type_v = GgmlType::F32;
  return std::make_unique<Engine>(Model::load(path), eo);
}

struct SetReport {
  double worst_cos = 1, worst_rel = 0, worst_agree = 1;
  int greedy_checked = 0, greedy_total = 0;
};

void check_set(const std::string& set) {
  const std::string dir = fixtures_dir() + "/" + set;
  std::unique_ptr<Engine> eng;
  try {
    eng = make_engine(dir + "/model.gguf");
  } catch (const Error& e) {
    if (std::string(e.what()).find("is not supported") != std::string::npos) {
      std::printf("[%-22s] SKIPPED: %s\n", set.c_str(), e.what());
      return;
    }
    throw;
  }
  const Tier tier = tier_of(eng->model().gguf());
  const int nv = eng->config().n_vocab;
  SetReport rep;
  std::vector<double> cosines;
  for (const auto& p : golden_prompts(set)) {
    auto j = read_json(dir + "/golden/" + p + ".json");
    const auto prompt = j["prompt_tokens"].get<std::vector<int32_t>>();
    const auto ref = read_f32(dir + "/golden/" + p + ".last_logits.f32");
    ASSERT_EQ(ref.size(), static_cast<size_t>(nv)) << set << "/" << p;
    const auto& steps = j["greedy"]["steps"];
    std::vector<float> logits;
    if (tier != Tier::Low) {
      eng->eval(0, prompt.data(), static_cast<int>(prompt.size()), 0, false, logits);
      const auto c = compare_logits(logits.data(), ref.data(), ref.size());
      const double min_cos = tier == Tier::Float ? 0.9999 : 0.999, max_rel = tier == Tier::Float ? 0.01 : 0.05;
      const bool logits_ok = c.cosine >= min_cos && c.max_abs <= max_rel * c.ref_std;
      if (!logits_ok) {
        std::printf("  STRICT MISS %s/%s: last logits cosine %.6f, max|d|/std %.4f\n", set.c_str(), p.c_str(), c.cosine, c.max_abs / c.ref_std);
      }
      EXPECT_GE(c.cosine, min_cos) << set << "/" << p;
      EXPECT_LE(c.max_abs, max_rel * c.ref_std) << set << "/" << p;
      rep.worst_cos = std::min(rep.worst_cos, c.cosine);
      rep.worst_rel = std::max(rep.worst_rel, c.max_abs / c.ref_std);
      // Greedy continuation, identical up to the first near-tie of llama.cpp.
      int pos = static_cast<int>(prompt.size());
      for (size_t s = 0; s < steps.size(); ++s) {
        if (steps[s]["margin"].get<double>() < 1e-2) break;
        const int32_t want = steps[s]["token"].get<int32_t>();
        const int32_t got = Sampler::argmax(logits.data(), nv);
        rep.greedy_total++;
        EXPECT_EQ(got, want) << set << "/" << p << " greedy step " << s;
        if (got != want) {
          std::printf("  STRICT MISS %s/%s: greedy step %zu gives %d, llama.cpp %d (its margin %.4f)\n", set.c_str(), p.c_str(), s, got, want,
                      steps[s]["margin"].get<double>());
          break;
        }
        rep.greedy_checked++;
        eng->eval(0, &got, 1, pos++, false, logits);
      }
    } else {
      // Teacher forcing: prompt + llama.cpp's greedy tokens as one input.
      std::vector<int32_t> all = prompt;
      for (const auto& st : steps) all.push_back(st["token"].get<int32_t>());
      all.pop_back();  // the last token's logits are not in the golden
      eng->eval(0, all.data(), static_cast<int>(all.size()), 0, true, logits);
      const float* last = logits.data() + (prompt.size() - 1) * static_cast<size_t>(nv);
      const auto c = compare_logits(last, ref.data(), ref.size());
      cosines.push_back(c.cosine);
      rep.worst_cos = std::min(rep.worst_cos, c.cosine);
      rep.worst_rel = std::max(rep.worst_rel, c.max_abs / c.ref_std);
      int agree = 0, counted = 0;
      for (size_t s = 0; s < steps.size(); ++s) {
        if (steps[s]["margin"].get<double>() <= 0.1) continue;
        const float* row = logits.data() + (prompt.size() - 1 + s) * static_cast<size_t>(nv);
        counted++;
        agree += Sampler::argmax(row, nv) == steps[s]["token"].get<int32_t>();
      }
      const double rate = counted ? double(agree) / counted : 1.0;
      rep.worst_agree = std::min(rep.worst_agree, rate);
      EXPECT_GE(rate, 0.9) << set << "/" << p << " teacher-forced top-1 agreement";
    }
  }
  if (tier == Tier::Low) {
    int good = 0;
    for (double c : cosines) {
      good += c >= 0.999;
      EXPECT_GE(c, 0.99) << set;
    }
    EXPECT_GE(good, static_cast<int>(cosines.size()) - 1) << set << ": last-position cosine >= 0.999 needed for all but one prompt";
  }
  std::printf("[%-22s] %s worst cosine %.6f, worst max|d|/std %.4f, greedy %d/%d steps, teacher-forced agreement %.3f\n", set.c_str(),
              tier == Tier::Float ? "float" : tier == Tier::Q8 ? "q8   " : "low  ", rep.worst_cos, rep.worst_rel, rep.greedy_checked, rep.greedy_total,
              rep.worst_agree);
}

}  // namespace

class GoldenSuite : public ::testing::TestWithParam<std::string> {};

// Sets whose deviation from llama.cpp is known and tracked in an open issue: they still run and
// print their figures, but are reported as skipped instead of failing CI. Keep this list short.
TEST_P(GoldenSuite, MatchesLlamaCpp) {
  if (GetParam().empty()) GTEST_SKIP() << "!!! fixtures folder " << fixtures_dir() << " is absent: golden forward tests SKIPPED !!!";
  check_set(GetParam());
}

static std::vector<std::string> sets_or_placeholder() {
  auto v = model_sets();
  if (v.empty()) v.push_back("");
  return v;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenSuite, ::testing::ValuesIn(sets_or_placeholder()), [](const auto& info) {
  std::string n = info.param.empty() ? "absent" : info.param;
  for (auto& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});
