#include "model/weights.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "kernels/quants.h"

namespace strata {

const GgufTensor& WeightBinder::get(const std::string& name) const {
  const GgufTensor* t = m_.tensor(name);
  STRATA_CHECK(t != nullptr, "{}: missing tensor '{}'", m_.path(), name);
  mark(*t);
  return *t;
}

QMatrix WeightBinder::mat(const std::string& name, int64_t rows, int64_t cols) const {
  const GgufTensor& t = get(name);
  const bool ok = t.n_dims <= 2 && t.ne[0] == static_cast<uint64_t>(cols) && t.ne[1] == static_cast<uint64_t>(rows);
  STRATA_CHECK(ok, "{}: tensor '{}' has shape {} but {}x{} (ne0 x ne1) was expected", m_.path(), name, t.shape_string(), cols, rows);
  STRATA_CHECK(has_dequantize(t.type), "{}: tensor '{}' has type {} which Strata cannot compute with yet", m_.path(), name, ggml_type_name(t.type));
  return QMatrix{t.type, rows, cols, t.data, static_cast<size_t>(t.row_bytes())};
}

VecF32 WeightBinder::vec(const std::string& name, int64_t n) const {
  const GgufTensor& t = get(name);
  STRATA_CHECK(t.type == GgmlType::F32, "{}: tensor '{}' has type {} (expected f32)", m_.path(), name, ggml_type_name(t.type));
  STRATA_CHECK(t.n_elements() == static_cast<uint64_t>(n), "{}: tensor '{}' has shape {} ({} values) but {} values were expected", m_.path(),
               name, t.shape_string(), t.n_elements(), n);
  return VecF32{reinterpret_cast<const float*>(t.data), n};
}

ExpertTensor WeightBinder::experts(const std::string& name, int64_t n_expert, int64_t rows, int64_t cols) const {
  const GgufTensor& t = get(name);
  const bool ok = t.n_dims == 3 && t.ne[0] == static_cast<uint64_t>(cols) && t.ne[1] == static_cast<uint64_t>(rows) &&
                  t.ne[2] == static_cast<uint64_t>(n_expert);
  STRATA_CHECK(ok, "{}: tensor '{}' has shape {} but {}x{}x{} was expected", m_.path(), name, t.shape_string(), cols, rows, n_expert);
  STRATA_CHECK(has_dequantize(t.type), "{}: tensor '{}' has type {} which Strata cannot compute with yet", m_.path(), name, ggml_type_name(t.type));
  ExpertTensor e;
  e.t = &t;
  e.type = t.type;
  e.rows = rows;
  e.cols = cols;
  e.n_expert = n_expert;
  e.row_bytes = t.row_bytes();
  e.expert_bytes = e.row_bytes * static_cast<uint64_t>(rows);
  return e;
}

ExpertBias WeightBinder::opt_expert_bias(const std::string& name, int64_t n_expert, int64_t n) const {
  if (!m_.tensor(name)) return {};
  const GgufTensor& t = get(name);
  STRATA_CHECK(t.type == GgmlType::F32 && t.ne[0] == static_cast<uint64_t>(n) && t.ne[1] == static_cast<uint64_t>(n_expert),
               "{}: tensor '{}' is {} {} but f32 {}x{} was expected", m_.path(), name, ggml_type_name(t.type), t.shape_string(), n, n_expert);
  return ExpertBias{reinterpret_cast<const float*>(t.data), n};
}

const int32_t* WeightBinder::i32_table(const std::string& name, int64_t rows, int64_t cols) const {
  const GgufTensor& t = get(name);
  const bool ok = t.n_dims <= 2 && t.ne[0] == static_cast<uint64_t>(cols) && t.ne[1] == static_cast<uint64_t>(rows);
  STRATA_CHECK(ok, "{}: tensor '{}' has shape {} but {}x{} (ne0 x ne1) was expected", m_.path(), name, t.shape_string(), cols, rows);
  STRATA_CHECK(t.type == GgmlType::I32, "{}: tensor '{}' has type {} (expected i32)", m_.path(), name, ggml_type_name(t.type));
  return reinterpret_cast<const int32_t*>(t.data);
}

std::vector<float> WeightBinder::dequantized(const std::string& name, int64_t rows, int64_t cols) const {
  const QMatrix q = mat(name, rows, cols);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) dequantize_row(q.type, q.row(r), v.data() + r * cols, cols);
  return v;
}

const GgufTensor* WeightBinder::tensor3(const std::string& name, int64_t ne0, int64_t ne1, int64_t ne2) const {
  const GgufTensor& t = get(name);
  const bool ok = t.ne[0] == static_cast<uint64_t>(ne0) && t.ne[1] == static_cast<uint64_t>(ne1) && t.ne[2] == static_cast<uint64_t>(ne2) &&
                  t.ne[3] == 1;
  STRATA_CHECK(ok, "{}: tensor '{}' has shape {} but {}x{}x{} was expected", m_.path(), name, t.shape_string(), ne0, ne1, ne2);
  STRATA_CHECK(has_dequantize(t.type), "{}: tensor '{}' has type {} which Strata cannot compute with yet", m_.path(), name, ggml_type_name(t.type));
  return &t;
}

void WeightBinder::check_all_used(const std::vector<std::string>& extra_ok) const {
  std::set<std::string> used(used_.begin(), used_.end());
  for (const auto& t : m_.tensors()) {
    std::string n(t.name);
    if (used.count(n)) continue;
    if (std::find(extra_ok.begin(), extra_ok.end(), n) != extra_ok.end()) continue;
    fail("{}: tensor '{}' is not used by the {} implementation (unknown model variant?)", m_.path(), n, m_.architecture());
  }
}

}  // namespace strata
