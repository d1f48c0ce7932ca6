#include "model/config.h"

#include "core/error.h"
#include "core/limits.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_names.h"

namespace strata {

namespace {
// Every count and size an architecture reads is in [0, kMaxMetaInt]: products of two stay far
// from int64 overflow and a corrupt value is an error naming the key, not a wrapped size.
constexpr int64_t kMaxMetaInt = int64_t{1} << 24;
int64_t checked(const MetaReader& r, const char* key, int64_t v) {
  STRATA_CHECK(v >= 0 && v <= kMaxMetaInt, "{}: metadata '{}{}' is {} (0..{} expected)", r.m.path(), r.prefix, key, v, kMaxMetaInt);
  return v;
}
}  // namespace

int64_t MetaReader::req_int(const char* key) const {
  auto v = m.get_int(prefix + key);
  STRATA_CHECK(v.has_value(), "{}: missing required metadata '{}{}'", m.path(), prefix, key);
  return checked(*this, key, *v);
}
int64_t MetaReader::opt_int(const char* key, int64_t def) const {
  const auto v = m.get_int(prefix + key);
  return v ? checked(*this, key, *v) : def;
}
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

void check_limits(const std::string& path, const ModelConfig& cfg) {
  auto check = [&](int layer, int value, const char* name, int limit, const char* constant) {
    if (value <= limit) return;
    const std::string where = layer >= 0 ? fmt::format(" (layer {})", layer) : "";
    fail("{}: {} is {}{}, more than the {} supported ({} in core/limits.h)", path, key::arch_key(cfg.arch, name), value, where, limit, constant);
  };
  check(-1, cfg.n_layer, key::kBlockCount, kMaxLayers, "kMaxLayers");
  for (int l = 0; l < static_cast<int>(cfg.layers.size()); ++l) {
    const LayerConfig& lc = cfg.layers[l];
    // Every architecture's reader checks its own keys; this catches one that forgot: rope writes
    // n_dims values into each cached key head.
    if (lc.attn != AttnKind::DeltaNet && (lc.rope.n_dims < 0 || lc.rope.n_dims % 2 != 0 || lc.rope.n_dims > lc.head_dim_k))
      fail("{}: {} is {} (layer {}): it must be even and at most the key head size {}", path, key::arch_key(cfg.arch, key::kRopeDimensionCount),
           lc.rope.n_dims, l, lc.head_dim_k);
    if (lc.ffn != FfnKind::Moe) continue;
    check(l, lc.n_expert, key::kExpertCount, kMaxExperts, "kMaxExperts");
    check(l, lc.n_expert_used, key::kExpertUsedCount, kMaxExpertsUsed, "kMaxExpertsUsed");
    check(l, lc.n_group, key::kExpertGroupCount, kMaxExpertGroups, "kMaxExpertGroups");
  }
}

void read_rope_scaling(const MetaReader& r, RopeConfig& rope, int n_ctx_train) {
  const std::string type = r.opt_string(key::kRopeScalingType, "none");
  float factor = r.opt_float(key::kRopeScalingFactor, 0.0f);
  if (type == "none") {
    rope.freq_scale = 1.0f;
    return;
  }
  STRATA_CHECK(type == "linear" || type == "yarn", "{}: unsupported rope scaling type '{}' (supported: none, linear, yarn)", r.m.path(), type);
  STRATA_CHECK(factor > 0.0f, "{}: rope scaling '{}' needs {}rope.scaling.factor > 0", r.m.path(), type, r.prefix);
  rope.freq_scale = 1.0f / factor;
  rope.n_ctx_orig = static_cast<int>(r.opt_int(key::kRopeScalingOrigCtx, n_ctx_train));
  if (type == "yarn") {
    rope.ext_factor = 1.0f;
    rope.beta_fast = r.opt_float(key::kRopeScalingYarnBetaFast, 32.0f);
    rope.beta_slow = r.opt_float(key::kRopeScalingYarnBetaSlow, 1.0f);
  }
}

}  // namespace strata
