// A failed expert read names what failed: the layer, the expert, the part (gate/up/down), the
// tensor, the file and the offset.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <vector>

#include "../model/golden_util.h"
#include "core/error.h"
#include "experts/expert_cache.h"
#include "experts/expert_store.h"
#include "experts/io_backend.h"
#include "model/expert_layout.h"
#include "model/model.h"

using namespace strata;
using namespace strata::test;

namespace {
// Reads synchronously with stdio; every read of part `bad_part` (gate 0, up 1, down 2, in the
// order the cache submits them) fails with EIO.
class PartFailingBackend final : public IoBackend {
 public:
  PartFailingBackend(std::vector<std::string> files, int bad_part) : files_(std::move(files)), bad_part_(bad_part) {}
  std::string describe() const override { return "part-failing (test)"; }
  bool direct() const override { return false; }
  void submit(ReadOp* op) override {
    if (submitted_++ % kExpertParts == bad_part_) {
      op->result = -EIO;
    } else {
      FILE* f = std::fopen(files_[op->file].c_str(), "rb");
      std::fseek(f, static_cast<long>(op->offset), SEEK_SET);
      op->result = static_cast<int64_t>(std::fread(op->dst, 1, op->len, f));
      std::fclose(f);
    }
    done_.push_back(op);
  }
  int reap(ReadOp** out, int max, bool) override {
    int n = 0;
    while (n < max && !done_.empty()) {
      out[n++] = done_.back();
      done_.pop_back();
    }
    return n;
  }
  int in_flight() const override { return static_cast<int>(done_.size()); }

 private:
  std::vector<std::string> files_;
  int bad_part_;
  int submitted_ = 0;
  std::vector<ReadOp*> done_;
};
}  // namespace

TEST(ExpertErrors, FailedReadNamesLayerExpertPartFileAndOffset) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (expert read error test)");
  auto model = Model::load(fixtures_dir() + "/qwen3moe-q8_0/model.gguf");
  ExpertStore store(expert_layout(model->gguf(), model->config(), model->weights()));
  int layer = 0;
  while (!store.is_moe(layer)) ++layer;
  for (int part = 0; part < kExpertParts; ++part) {
    ASSERT_NE(store.layer(layer).part[part].tensor.find(fmt::format("ffn_{}_exps", expert_part_name(part))), std::string::npos);
    ExpertCacheOptions o;
    o.cache_bytes = 64ull << 20;
    o.max_experts = 4;
    ExpertCache cache(store, std::make_unique<PartFailingBackend>(store.files(), part), o);
    cache.begin_batch(1);
    const int32_t e = 3;
    cache.request(layer, &e, 1);
    const PartRead r = store.part_read(layer, e, part);
    try {
      cache.acquire(layer, e);
      FAIL() << "expected a read error";
    } catch (const Error& err) {
      const std::string msg = err.what();
      EXPECT_NE(msg.find(fmt::format("layer {}, expert {}", layer, e)), std::string::npos) << msg;
      EXPECT_NE(msg.find(fmt::format("its {} matrix", expert_part_name(part))), std::string::npos) << msg;
      EXPECT_NE(msg.find(store.layer(layer).part[part].tensor), std::string::npos) << msg;
      EXPECT_NE(msg.find(fmt::format("offset {} of {}", r.offset, store.files()[r.file])), std::string::npos) << msg;
      EXPECT_NE(msg.find("failed after retries"), std::string::npos) << msg;
    }
    cache.on_abort();
  }
}
