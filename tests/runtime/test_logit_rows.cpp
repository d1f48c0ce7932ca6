// EngineOptions::logit_rows: the logits rows a pass may return are in the memory plan
// (MemoryPlan::logits) and a pass asking more is refused; eval_rows hands a long input's rows over
// pass by pass within them, bit for bit the rows eval gives.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/model.h"
#include "runtime/engine.h"

namespace strata::test {
namespace {

std::unique_ptr<Engine> rows_engine(int logit_rows, int n_batch) {
  const std::string path = std::string(STRATA_FIXTURES_DIR) + "/qwen3moe-q8_0/model.gguf";
  if (!std::filesystem::exists(path)) throw std::runtime_error("fixture " + path + " is absent");
  EngineOptions eo;
  eo.n_ctx = 128;
  eo.n_threads = 2;
  eo.n_batch = n_batch;
  eo.logit_rows = logit_rows;
  eo.type_k = eo.type_v = GgmlType::F32;
  return std::make_unique<Engine>(Model::load(path), eo);
}

std::vector<int32_t> row_tokens(int n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = 20 + (i * 13) % 700;
  return t;
}

TEST(LogitRows, ArePlannedAndAPassAskingMoreIsRefused) {
  auto eng = rows_engine(3, 32);
  const uint64_t row = 4ull * static_cast<uint64_t>(eng->config().n_vocab);
  // The caller's rows and eval_rows' pass buffer (at least two rows).
  EXPECT_EQ(eng->tier().plan().logits, row * (3 + 3));
  EXPECT_EQ(eng->tier().plan().total(), eng->tier().plan().fixed() + eng->tier().plan().expert_cache);
  const std::vector<int32_t> t = row_tokens(4);
  std::vector<float> lg;
  const SeqInput four{0, t.data(), 4, Logits::All};
  try {
    eng->forward({&four, 1}, lg);
    ADD_FAILURE() << "a pass of 4 logits rows passed a plan for 3";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("logit_rows"), std::string::npos) << e.what();
  }
  eng->reset(0);
  const SeqInput three{0, t.data(), 3, Logits::All};
  eng->forward({&three, 1}, lg);
  EXPECT_EQ(lg.size(), 3u * static_cast<size_t>(eng->config().n_vocab));
  // The default: any pass (n_batch rows).
  auto any = rows_engine(0, 16);
  EXPECT_EQ(any->options().logit_rows, 16);
}

TEST(LogitRows, EvalRowsGivesEvalsRowsPassByPass) {
  const int n = 100, first = 40;
  const std::vector<int32_t> t = row_tokens(n);
  std::vector<float> ref;
  rows_engine(0, 32)->eval(0, t.data(), n, 0, /*all_logits=*/true, ref);
  const size_t nv = ref.size() / static_cast<size_t>(n);
  for (int cap : {1, 5, 32}) {
    auto eng = rows_engine(cap, 32);
    std::vector<int> seen;
    std::vector<float> got;
    eng->eval_rows(0, t.data(), n, 0, first, [&](int i, const float* row) {
      seen.push_back(i);
      got.insert(got.end(), row, row + nv);
    });
    ASSERT_EQ(seen.size(), static_cast<size_t>(n - first)) << "logit_rows " << cap;
    for (size_t k = 0; k < seen.size(); ++k) EXPECT_EQ(seen[k], first + static_cast<int>(k)) << "rows out of order, logit_rows " << cap;
    EXPECT_TRUE(std::equal(got.begin(), got.end(), ref.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(first) * nv)))
        << "eval_rows' rows differ from eval's with logit_rows " << cap;
    EXPECT_EQ(eng->seq_length(0), n);
    // eval's last row is the same through eval_rows.
    std::vector<float> last;
    eng->eval(0, t.data(), n, 0, /*all_logits=*/false, last);
    EXPECT_TRUE(std::equal(last.begin(), last.end(), ref.end() - static_cast<ptrdiff_t>(nv))) << "logit_rows " << cap;
  }
}

}  // namespace
}  // namespace strata::test
