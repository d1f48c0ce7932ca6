#include "experts/expert_store.h"

#include <algorithm>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "model/config.h"
#include "model/weights.h"

namespace strata {

ExpertStore::ExpertStore(const GgufModel& m, const ModelConfig& cfg, const ModelWeights& w) {
  for (const auto& p : m.parts()) {
    files_.push_back(p->path);
    file_sizes_.push_back(p->size);
  }
  layers_.resize(cfg.layers.size());
  for (size_t l = 0; l < cfg.layers.size(); ++l) {
    if (cfg.layers[l].ffn != FfnKind::Moe) continue;
    const LayerWeights& lw = w.layers[l];
    const ExpertTensor* ts[3] = {&lw.gate_exps, &lw.up_exps, &lw.down_exps};
    ExpertLayer& L = layers_[l];
    L.n_expert = cfg.layers[l].n_expert;
    for (int p = 0; p < 3; ++p) {
      const ExpertTensor& t = *ts[p];
      STRATA_CHECK(!t.empty(), "layer {}: MoE layer without expert tensors", l);
      ExpertPart& P = L.part[p];
      P.type = t.type;
      P.rows = t.rows;
      P.cols = t.cols;
      P.file = t.t->part;
      P.offset = t.t->offset;
      P.stride = t.expert_bytes;
      P.row_bytes = t.row_bytes;
      STRATA_CHECK(P.offset + P.stride * static_cast<uint64_t>(L.n_expert) <= file_sizes_[P.file],
                   "{}: expert tensor '{}' extends past the end of the file", files_[P.file], t.t->name);
      L.expert_bytes += P.stride;
      // Worst-case aligned superset of one expert's part: the payload rounded up plus one page.
      L.slot_bytes += align_up(P.stride, kIoAlign) + kIoAlign;
    }
    total_bytes_ += L.expert_bytes * static_cast<uint64_t>(L.n_expert);
    total_experts_ += L.n_expert;
  }
}

PartRead ExpertStore::part_read(int layer, int e, int part) const {
  const ExpertPart& P = layers_[layer].part[part];
  PartRead r;
  r.file = P.file;
  r.offset = P.offset + static_cast<uint64_t>(e) * P.stride;
  r.len = P.stride;
  r.aligned_offset = align_down(r.offset, kIoAlign);
  r.aligned_len = align_up(r.offset + r.len, kIoAlign) - r.aligned_offset;
  return r;
}

uint64_t ExpertStore::max_slot_bytes() const {
  uint64_t m = 0;
  for (const auto& L : layers_) m = std::max(m, L.slot_bytes);
  return m;
}

}  // namespace strata
