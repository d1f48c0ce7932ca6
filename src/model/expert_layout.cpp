#include "model/expert_layout.h"

#include <string>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "model/config.h"
#include "model/weights.h"

namespace strata {

namespace {
ExpertPart part_of(const ExpertTensor& t) {
  ExpertPart p;
  p.tensor = std::string(t.t->name);
  p.type = t.type;
  p.rows = t.rows;
  p.cols = t.cols;
  p.file = t.t->part;
  p.offset = t.t->offset;
  p.stride = t.expert_bytes;
  p.row_bytes = t.row_bytes;
  return p;
}
}  // namespace

ExpertLayout expert_layout(const GgufModel& m, const ModelConfig& cfg, const ModelWeights& w) {
  ExpertLayout out;
  for (const auto& p : m.parts()) {
    out.files.push_back(p->path);
    out.file_sizes.push_back(p->size);
  }
  // The trunk's layers, then the NextN blocks' (layer n_layer + j, run by Model::forward_nextn).
  const size_t n_trunk = cfg.layers.size();
  out.layers.resize(n_trunk + cfg.nextn.size());
  for (size_t l = 0; l < out.layers.size(); ++l) {
    const bool trunk = l < n_trunk;
    const LayerConfig& lc = trunk ? cfg.layers[l] : cfg.nextn[l - n_trunk];
    if (lc.ffn != FfnKind::Moe) continue;
    if (!trunk && w.nextn[l - n_trunk].eh_proj.empty()) continue;  // a NextN block the file does not carry
    const LayerWeights& lw = trunk ? w.layers[l] : w.nextn[l - n_trunk].block;
    const ExpertTensor* ts[kExpertParts] = {&lw.gate_exps, &lw.up_exps, &lw.down_exps};
    ExpertLayer& L = out.layers[l];
    L.n_expert = lc.n_expert;
    for (int p = 0; p < kExpertParts; ++p) {
      STRATA_CHECK(!ts[p]->empty(), "layer {}: MoE layer without {} expert tensor", l, expert_part_name(p));
      L.part[p] = part_of(*ts[p]);
    }
  }
  return out;
}

}  // namespace strata
