// EngineOptions::check_finite: a pass whose logits hold a NaN or an Inf is run again with a tensor
// observer to name the first intermediate tensor (in the order the pass computes them) that was not
// finite, so the error says where it arose: a corrupt norm in layer 3, an overflow in an expert.
#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "runtime/engine.h"

namespace strata {
namespace {

struct FirstNonFinite final : TensorObserver {
  bool found = false;
  std::string name;
  int layer = 0, row = 0;
  bool wants(const char*, int) override { return !found; }
  void on_tensor(const char* n, int l, const float* d, int rows, int cols) override {
    for (int r = 0; r < rows && !found; ++r)
      for (int c = 0; c < cols; ++c)
        if (!std::isfinite(d[static_cast<size_t>(r) * static_cast<size_t>(cols) + static_cast<size_t>(c)])) {
          found = true;
          name = n;
          layer = l;
          row = r;
          break;
        }
  }
};

}  // namespace

bool all_finite(const float* v, size_t n) {
  // Sum of x * 0: NaN for a NaN or an Inf anywhere, 0 otherwise; no branch per element.
  float acc = 0.0f;
  for (size_t i = 0; i < n; ++i) acc += v[i] * 0.0f;
  return acc == 0.0f;
}

std::string Engine::non_finite_report(const Batch& b) {
  const int seq = b.seq ? b.seq[0] : 0;
  std::string what = fmt::format("the logits of the pass over sequence {} positions {}..{} are not finite (NaN or Inf)", seq, b.pos[0], b.pos[b.n - 1]);
  FirstNonFinite w;
  TensorObserver* prev = model_->tensor_observer();
  model_->set_tensor_observer(&w);
  size_t rows = b.logits ? 0 : 1;
  for (int i = 0; b.logits && i < b.n; ++i) rows += b.logits[i] ? 1 : 0;
  std::vector<float> logits(std::max<size_t>(rows, 1) * static_cast<size_t>(config().n_vocab));
  try {
    model_->forward(b, *kv_, logits.data());
  } catch (const std::exception&) {  // the report is best effort: the pass already failed
  }
  model_->set_tensor_observer(prev);
  if (w.found) {
    const std::string where = w.layer >= 0 ? fmt::format("layer {}", w.layer) : "the output head";
    const std::string at = w.row < b.n ? fmt::format(", position {}", b.pos[w.row]) : "";
    what += fmt::format(": the first tensor that was not is '{}' of {}{}", w.name, where, at);
  }
  return what + "; the model's weights (or its activations' range) are broken; --no-check-finite skips this check";
}

}  // namespace strata
