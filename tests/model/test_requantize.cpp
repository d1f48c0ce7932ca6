// strata quantize --experts-only's core (model/requantize.h) on the committed trained model: the
// routed expert tensors become Q4_0 row by row as the reference quantizer writes them, every other
// tensor and metadata entry is copied, the result loads; bad types and files are clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "kernels/quants.h"
#include "model/model.h"
#include "model/requantize.h"

using namespace strata;

namespace {
const std::string kRequantModel = std::string(STRATA_SOURCE_DIR) + "/../models/strata-moe-tiny/model.gguf";
std::string requant_tmp_path(const char* tag) { return "/tmp/strata_requant_" + std::string(tag) + "_" + std::to_string(::getpid()) + ".gguf"; }
}  // namespace

TEST(Requantize, ExpertsBecomeTheTypeEverythingElseIsCopied) {
  const std::string out = requant_tmp_path("q4");
  ThreadPool pool(2);
  const RequantizeReport r = requantize_experts(kRequantModel, out, GgmlType::Q4_0, &pool);
  EXPECT_EQ(r.expert_tensors, 8 * 3);  // 8 layers of gate, up, down
  EXPECT_GT(r.other_tensors, 8);
  EXPECT_LT(r.expert_bytes_out, r.expert_bytes_in * 6 / 10);  // 4.5 of 8.5 bits per value

  const auto a = GgufModel::open(kRequantModel), b = GgufModel::open(out);
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  ASSERT_EQ(a->metadata().size(), b->metadata().size());
  for (size_t i = 0; i < a->metadata().size(); ++i) {
    EXPECT_EQ(a->metadata()[i].first, b->metadata()[i].first);
    EXPECT_EQ(a->metadata()[i].second.to_string(200), b->metadata()[i].second.to_string(200)) << a->metadata()[i].first;
  }
  EXPECT_EQ(b->find("tokenizer.ggml.tokens")->count, 4096u);
  int checked_rows = 0;
  for (size_t i = 0; i < a->tensors().size(); ++i) {
    const GgufTensor &ta = a->tensors()[i], &tb = b->tensors()[i];
    ASSERT_EQ(ta.name, tb.name);
    EXPECT_EQ(ta.ne, tb.ne) << ta.name;
    const bool expert = ta.name.find("_exps.weight") != std::string_view::npos;
    if (!expert) {
      EXPECT_EQ(tb.type, ta.type) << ta.name;
      ASSERT_EQ(ta.nbytes, tb.nbytes) << ta.name;
      EXPECT_EQ(std::memcmp(ta.data, tb.data, ta.nbytes), 0) << ta.name;
      continue;
    }
    EXPECT_EQ(tb.type, GgmlType::Q4_0) << ta.name;
    // The first and last rows: the reference quantizer's bytes of the dequantized source row.
    const int64_t cols = static_cast<int64_t>(ta.ne[0]), rows = static_cast<int64_t>(ta.n_elements()) / cols;
    std::vector<float> f(static_cast<size_t>(cols));
    std::vector<uint8_t> q(tb.row_bytes());
    for (int64_t r0 : {int64_t{0}, rows - 1}) {
      dequantize_row(ta.type, ta.data + r0 * ta.row_bytes(), f.data(), cols);
      quantize_row(GgmlType::Q4_0, f.data(), q.data(), cols);
      EXPECT_EQ(std::memcmp(q.data(), tb.data + r0 * tb.row_bytes(), q.size()), 0) << ta.name << " row " << r0;
      ++checked_rows;
    }
  }
  EXPECT_EQ(checked_rows, 2 * 24);
  EXPECT_NO_THROW(Model::load(out));
  std::remove(out.c_str());
}

TEST(Requantize, BadTypesAndFilesAreClearErrors) {
  const std::string out = requant_tmp_path("bad");
  EXPECT_FALSE(can_quantize_to(GgmlType::IQ2_XXS));
  EXPECT_TRUE(can_quantize_to(GgmlType::Q2_K));
  try {
    requantize_experts(kRequantModel, out, GgmlType::IQ2_XXS, nullptr);
    ADD_FAILURE() << "iq2_xxs has no quantizer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no quantizer"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("q4_0"), std::string::npos) << e.what();  // lists the types it can write
  }
  EXPECT_THROW(requantize_experts(kRequantModel, kRequantModel, GgmlType::Q4_0, nullptr), Error);  // onto itself
  // A file without routed experts.
  const std::string dense = requant_tmp_path("dense");
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  std::vector<float> x(32, 1.0f);
  w.add_tensor("blk.0.ffn_up.weight", GgmlType::F32, {32}, x.data(), x.size() * 4);
  w.write(dense);
  try {
    requantize_experts(dense, out, GgmlType::Q4_0, nullptr);
    ADD_FAILURE() << "no experts";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no routed expert tensors"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(out));  // nothing written
  std::remove(dense.c_str());
}
