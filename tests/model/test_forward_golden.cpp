// The golden suite: every model set in the fixtures folder (STRATA_FIXTURES, default
// ../shared/fixtures) against llama.cpp's outputs.
//
// - F32 and Q8_0 sets (general.file_type 0 and 7) match llama.cpp bit for bit: the logits of
//   the whole prompt in one batch (the last position's full row, with logits at every position
//   or the last only, and the recorded top-20 at every position), then all 32 greedy steps one token at a time (the token and the recorded
//   top-20 logits it was chosen from). docs/ARCHITECTURE.md, "Numerics", says how.
// - Sets of 6 bits or fewer per weight are held to tolerances (cosine, max |d| / std of the last
//   position; teacher-forced top-1 agreement).
// - A file type with neither criterion fails. A set listed in kUnsupportedSets
//   (tests/fixture_sets.h) asserts that it still fails to load with the recorded error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>

#include "core/error.h"
#include "kernels/kernel_table.h"
#include "golden_util.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

using namespace strata;
using namespace strata::test;

namespace {

std::unique_ptr<Engine> golden_engine(const std::string& path, int n_batch = 256) {
  EngineOptions eo;
  eo.n_ctx = 256;
  eo.n_threads = 2;
  eo.n_batch = n_batch;
  eo.type_k = eo.type_v = GgmlType::F32;
  return std::make_unique<Engine>(Model::load(path), eo);
}

// The recorded top-k [[id, logit], ...] against a row: ids whose logit is not bit-equal.
int topk_mismatches(const nlohmann::json& topk, const float* row, std::string* first) {
  int bad = 0;
  for (const auto& e : topk) {
    const int32_t id = e[0].get<int32_t>();
    const float want = static_cast<float>(e[1].get<double>());  // printed with 9 digits: exact
    if (float_bits(row[id]) == float_bits(want)) continue;
    if (!bad++ && first) {
      char buf[120];
      std::snprintf(buf, sizeof buf, "id %d: %.9g vs llama.cpp %.9g", id, row[id], want);
      *first = buf;
    }
  }
  return bad;
}

// F32 / Q8_0: bit for bit.
void check_exact(const std::string& set, Engine& eng) {
  const std::string dir = fixtures_dir() + "/" + set;
  const int nv = eng.config().n_vocab;
  int positions = 0, steps_checked = 0;
  for (const auto& p : golden_prompts(set)) {
    const auto j = read_json(dir + "/golden/" + p + ".json");
    const auto prompt = j["prompt_tokens"].get<std::vector<int32_t>>();
    const auto ref = read_f32(dir + "/golden/" + p + ".last_logits.f32");
    ASSERT_EQ(ref.size(), static_cast<size_t>(nv)) << set << "/" << p;
    const int n = static_cast<int>(prompt.size());
    // The prompt in one batch, logits at every position (as llama.cpp was run).
    std::vector<float> all;
    eng.eval(0, prompt.data(), n, 0, true, all);
    const float* last = all.data() + static_cast<size_t>(n - 1) * nv;
    const std::string d = row_difference(last, ref.data(), ref.size());
    EXPECT_TRUE(d.empty()) << set << "/" << p << " last prompt position: " << d;
    const auto& ptopk = j["prompt_topk"];
    ASSERT_EQ(ptopk.size(), prompt.size()) << set << "/" << p;
    for (int pos = 0; pos < n; ++pos) {
      std::string first;
      const int bad = topk_mismatches(ptopk[pos], all.data() + static_cast<size_t>(pos) * nv, &first);
      EXPECT_EQ(bad, 0) << set << "/" << p << " prompt position " << pos << ": top-20 logits differ, " << first;
      positions++;
    }
    // The same prompt asking for the last logits only (as the CLI and the server do), then
    // greedy, one token per step: every step's token and logits. llama.cpp's token is fed back,
    // so one difference does not hide the next.
    std::vector<float> row, next;
    eng.eval(0, prompt.data(), n, 0, false, row);
    ASSERT_EQ(row.size(), static_cast<size_t>(nv));
    const std::string d1 = row_difference(row.data(), ref.data(), ref.size());
    EXPECT_TRUE(d1.empty()) << set << "/" << p << " last prompt position (last logits only): " << d1;
    const auto& steps = j["greedy"]["steps"];
    int pos = n, bad_steps = 0;
    for (size_t s = 0; s < steps.size(); ++s) {
      const int32_t want = steps[s]["token"].get<int32_t>();
      const int32_t got = Sampler::argmax(row.data(), nv);
      std::string first;
      const int bad = topk_mismatches(steps[s]["topk"], row.data(), &first);
      if ((got != want || bad) && bad_steps++ < 3)
        ADD_FAILURE() << set << "/" << p << " greedy step " << s << ": token " << got << " (llama.cpp " << want << "), " << bad
                      << " of its top-20 logits differ" << (bad ? ", " + first : "");
      steps_checked++;
      if (s + 1 == steps.size()) break;
      eng.eval(0, &want, 1, pos++, false, next);
      row.assign(next.begin(), next.begin() + nv);
    }
    EXPECT_EQ(bad_steps, 0) << set << "/" << p << ": greedy steps that are not bit-exact";
  }
  std::printf("[%-22s] exact: %d prompt positions and %d greedy steps compared bit for bit\n", set.c_str(), positions, steps_checked);
}

// Six bits or fewer: tolerances (the activations meet differently rounded weights).
void check_tolerance(const std::string& set, Engine& eng) {
  const std::string dir = fixtures_dir() + "/" + set;
  const int nv = eng.config().n_vocab;
  double worst_cos = 1, worst_rel = 0, worst_agree = 1;
  std::vector<double> cosines;
  for (const auto& p : golden_prompts(set)) {
    auto j = read_json(dir + "/golden/" + p + ".json");
    const auto prompt = j["prompt_tokens"].get<std::vector<int32_t>>();
    const auto ref = read_f32(dir + "/golden/" + p + ".last_logits.f32");
    ASSERT_EQ(ref.size(), static_cast<size_t>(nv)) << set << "/" << p;
    const auto& steps = j["greedy"]["steps"];
    // Teacher forcing: prompt + llama.cpp's greedy tokens as one input.
    std::vector<int32_t> all = prompt;
    for (const auto& st : steps) all.push_back(st["token"].get<int32_t>());
    all.pop_back();  // the last token's logits are not in the golden
    std::vector<float> logits;
    eng.eval(0, all.data(), static_cast<int>(all.size()), 0, true, logits);
    const float* last = logits.data() + (prompt.size() - 1) * static_cast<size_t>(nv);
    const auto c = compare_logits(last, ref.data(), ref.size());
    cosines.push_back(c.cosine);
    worst_cos = std::min(worst_cos, c.cosine);
    worst_rel = std::max(worst_rel, c.max_abs / c.ref_std);
    int agree = 0, counted = 0;
    for (size_t s = 0; s < steps.size(); ++s) {
      if (steps[s]["margin"].get<double>() <= 0.1) continue;
      const float* row = logits.data() + (prompt.size() - 1 + s) * static_cast<size_t>(nv);
      counted++;
      agree += Sampler::argmax(row, nv) == steps[s]["token"].get<int32_t>();
    }
    const double rate = counted ? double(agree) / counted : 1.0;
    worst_agree = std::min(worst_agree, rate);
    EXPECT_GE(rate, 0.9) << set << "/" << p << " teacher-forced top-1 agreement";
  }
  int good = 0;
  for (double c : cosines) {
    good += c >= 0.999;
    EXPECT_GE(c, 0.99) << set;
  }
  EXPECT_GE(good, static_cast<int>(cosines.size()) - 1) << set << ": last-position cosine >= 0.999 needed for all but one prompt";
  std::printf("[%-22s] tolerance: worst cosine %.6f, worst max|d|/std %.4f, teacher-forced agreement %.3f\n", set.c_str(), worst_cos, worst_rel,
              worst_agree);
}

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

class GoldenSuite : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenSuite, MatchesLlamaCpp) {
  const std::string set = GetParam(), path = fixtures_dir() + "/" + set + "/model.gguf";
  if (const UnsupportedSet* u = unsupported_set(set); u && u->model_error) {
    expect_still_unsupported(*u, "model", u->model_error, [&] { golden_engine(path); });
    return;
  }
  auto eng = golden_engine(path);  // any other set must load
  const int64_t ft = eng->model().gguf().get_int("general.file_type").value_or(-1);
  const auto crit = criterion_of(ft);
  ASSERT_TRUE(crit.has_value()) << set << ": general.file_type " << ft << " has no golden criterion (add one in criterion_of)";
  if (ends_with(set, "-f32") || ends_with(set, "-q8_0")) {
    ASSERT_EQ(*crit, Criterion::Exact) << set << ": an F32/Q8_0 set must be checked bit for bit (file_type " << ft << ")";
  }
  // The scalar table (CPUs without AVX2) is the double-precision reference, not llama.cpp's AVX2
  // association: within tolerance there, as llama.cpp's own non-AVX build would be.
  if (*crit == Criterion::Exact && kernels().isa == Isa::Scalar) {
    std::printf("[%-22s] scalar kernel table: checked within tolerance, not bit for bit\n", set.c_str());
    check_tolerance(set, *eng);
    return;
  }
  if (*crit == Criterion::Exact) check_exact(set, *eng);
  else check_tolerance(set, *eng);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenSuite, ::testing::ValuesIn(model_sets()), [](const auto& info) {
  std::string n = info.param;
  for (auto& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});
// Without a fixtures folder there are no instances; FixtureSets.* fails or skips loudly then.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GoldenSuite);
