#include "experts/expert_store.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace strata {

const char* expert_part_name(int part) {
  static constexpr const char* kNames[kExpertParts] = {"gate", "up", "down"};
  return part >= 0 && part < kExpertParts ? kNames[part] : "?";
}

ExpertStore::ExpertStore(ExpertLayout layout)
    : layers_(std::move(layout.layers)), files_(std::move(layout.files)), file_sizes_(std::move(layout.file_sizes)) {
  STRATA_CHECK(files_.size() == file_sizes_.size(), "expert layout: {} files but {} file sizes", files_.size(), file_sizes_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    ExpertLayer& L = layers_[l];
    if (L.n_expert == 0) continue;
    STRATA_CHECK(L.n_expert > 0, "layer {}: {} experts", l, L.n_expert);
    L.expert_bytes = L.slot_bytes = 0;
    for (int p = 0; p < kExpertParts; ++p) {
      const ExpertPart& P = L.part[p];
      STRATA_CHECK(P.stride > 0, "layer {}: MoE layer without {} expert tensor", l, expert_part_name(p));
      STRATA_CHECK(P.file < files_.size(), "layer {}: expert tensor '{}' lies in split part {} of {}", l, P.tensor, P.file, files_.size());
      STRATA_CHECK(P.offset + P.stride * static_cast<uint64_t>(L.n_expert) <= file_sizes_[P.file],
                   "{}: expert tensor '{}' extends past the end of the file", files_[P.file], P.tensor);
      L.expert_bytes += P.stride;
      // Worst-case aligned superset of one expert's part: the payload rounded up plus one page.
      L.slot_bytes += align_up(P.stride, io_align()) + io_align();
    }
  }
}

PartRead ExpertStore::part_read(int layer, int e, int part) const {
  const ExpertPart& P = layers_[layer].part[part];
  PartRead r;
  r.file = P.file;
  r.offset = P.offset + static_cast<uint64_t>(e) * P.stride;
  r.len = P.stride;
  r.aligned_offset = align_down(r.offset, io_align());
  r.aligned_len = align_up(r.offset + r.len, io_align()) - r.aligned_offset;
  return r;
}

uint64_t ExpertStore::max_slot_bytes() const {
  uint64_t m = 0;
  for (const auto& L : layers_) m = std::max(m, L.slot_bytes);
  return m;
}

}  // namespace strata
