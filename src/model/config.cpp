#include "model/config.h"

#include <algorithm>

#include "core/error.h"
#include "gguf/gguf_file.h"

namespace strata {

const char* gating_name(GatingFunc g) {
  switch (g) {
    case GatingFunc::Softmax: return "softmax";
    case GatingFunc::Sigmoid: return "sigmoid";
    case GatingFunc::SoftmaxWeight: return "softmax_weight";
    case GatingFunc::SqrtSoftplus: return "sqrt_softplus";
  }
  return "?";
}

int ModelConfig::max_head_dim() const {
  int d = 0;
  for (const auto& l : layers) d = std::max({d, l.head_dim_k, l.head_dim_v});
  return d;
}

int64_t MetaReader::req_int(const char* key) const {
  auto v = m.get_int(prefix + key);
  STRATA_CHECK(v.has_value(), "{}: missing required metadata '{}{}'", m.path(), prefix, key);
  return *v;
}
int64_t MetaReader::opt_int(const char* key, int64_t def) const { return m.get_int(prefix + key).value_or(def); }
float MetaReader::req_float(const char* key) const {
  auto v = m.get_float(prefix + key);
  STRATA_CHECK(v.has_value(), "{}: missing required metadata '{}{}'", m.path(), prefix, key);
  return static_cast<float>(*v);
}
float MetaReader::opt_float(const char* key, float def) const {
  auto v = m.get_float(prefix + key);
  return v ? static_cast<float>(*v) : def;
}
bool MetaReader::opt_bool(const char* key, bool def) const { return m.get_bool(prefix + key).value_or(def); }
bool MetaReader::has(const char* key) const { return m.find(prefix + key) != nullptr; }
std::string MetaReader::opt_string(const char* key, const std::string& def) const { return m.get_string(prefix + key).value_or(def); }

void read_rope_scaling(const MetaReader& r, RopeConfig& rope, int n_ctx_train) {
  const std::string type = r.opt_string("rope.scaling.type", "none");
  float factor = r.opt_float("rope.scaling.factor", 0.0f);
  if (type == "none") {
    rope.freq_scale = 1.0f;
    return;
  }
  STRATA_CHECK(type == "linear" || type == "yarn", "{}: unsupported rope scaling type '{}' (supported: none, linear, yarn)", r.m.path(), type);
  STRATA_CHECK(factor > 0.0f, "{}: rope scaling '{}' needs {}rope.scaling.factor > 0", r.m.path(), type, r.prefix);
  rope.freq_scale = 1.0f / factor;
  rope.n_ctx_orig = static_cast<int>(r.opt_int("rope.scaling.original_context_length", n_ctx_train));
  if (type == "yarn") {
    rope.ext_factor = 1.0f;
    rope.beta_fast = r.opt_float("rope.scaling.yarn_beta_fast", 32.0f);
    rope.beta_slow = r.opt_float("rope.scaling.yarn_beta_slow", 1.0f);
  }
}

}  // namespace strata
