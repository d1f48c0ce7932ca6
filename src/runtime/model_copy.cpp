#include "runtime/model_copy.h"

#include <algorithm>
#include <fmt/format.h>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "runtime/expert_tier.h"

namespace strata {

std::vector<std::string> tensor_table_lines(const GgufModel& m) {
  std::vector<std::string> v;
  for (const auto& t : m.tensors())
    v.push_back(fmt::format("{} {} {} {} @{}:{}", t.name, ggml_type_name(t.type), t.shape_string(), t.nbytes, t.part, t.offset));
  std::string sizes = "file sizes", heads = "header hashes";
  for (const auto& p : m.parts()) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the header (metadata and tensor table)
    for (uint64_t i = 0; i < p->data_offset; ++i) h = (h ^ p->base[i]) * 1099511628211ull;
    sizes += fmt::format(" {}", p->size);
    heads += fmt::format(" {:016x}", h);
  }
  v.push_back(sizes);
  v.push_back(heads);
  return v;
}

std::string first_table_difference(const std::vector<std::string>& a, const std::vector<std::string>& b, const std::string& a_name,
                                   const std::string& b_name) {
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const std::string x = i < a.size() ? a[i] : "(none)", y = i < b.size() ? b[i] : "(none)";
    if (x == y) continue;
    const std::string name = i + 2 < a.size() ? "tensor '" + x.substr(0, x.find(' ')) + "'" : i < a.size() ? x.substr(0, x.find(' ', 5)) : "the tensor table";
    return fmt::format("{} differs ({}: {}; {}: {})", name, a_name, x, b_name, y);
  }
  return "";
}

std::vector<std::string> checked_model_copy(const GgufModel& model, const std::string& copy) {
  const auto c = GgufModel::open(copy);
  const std::string diff = first_table_difference(tensor_table_lines(model), tensor_table_lines(*c), model.path(), copy);
  if (!diff.empty()) fail("--model-copy {} is not a copy of {}: {}", copy, model.path(), diff);
  std::vector<std::string> paths;
  for (const auto& p : c->parts()) paths.push_back(p->path);
  return paths;
}

DriveProbe measure_tier_drives(const ExpertTier& tier, const TierOptions& opt, int depth, uint64_t bytes) {
  const ExpertStore& store = tier.store();
  std::vector<std::vector<std::string>> drives{store.files()};
  for (const std::string& copy : opt.model_copies) drives.push_back(checked_model_copy(tier.model().gguf(), copy));
  return measure_drives(drives, store.file_sizes()[0], opt.force_pread, depth, bytes);
}

}  // namespace strata
