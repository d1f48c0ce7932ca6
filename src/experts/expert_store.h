#pragma once
// Where every routed expert's bytes live, by formula: a MoE layer's gate/up/down tensors are
// [n_expert, rows, cols], so expert e of a part starts at tensor_offset + e * stride in the
// part's file (split models included). No index table, no conversion step.
#include <cstdint>
#include <string>
#include <vector>

#include "core/page_size.h"  // io_align(): O_DIRECT offset, length and buffer alignment
#include "gguf/ggml_type.h"

namespace strata {


// The three matrices of an expert, in this order everywhere (reads, slots, errors).
inline constexpr int kExpertParts = 3;
const char* expert_part_name(int part);  // "gate", "up", "down"

// Where one part of a MoE layer's experts lives. Filled by the model layer from the tensors it
// bound (model/expert_layout.h), so this tier needs no model types.
struct ExpertPart {
  std::string tensor;       // GGUF tensor name, for errors
  GgmlType type = GgmlType::F32;
  int64_t rows = 0, cols = 0;  // one expert's matrix [rows, cols]
  uint32_t file = 0;        // split part index
  uint64_t offset = 0;      // absolute offset of expert 0 in that file
  uint64_t stride = 0;      // bytes of one expert's matrix
  uint64_t row_bytes = 0;
};

struct ExpertLayer {
  int n_expert = 0;             // 0: not a MoE layer
  ExpertPart part[kExpertParts];  // gate, up, down
  // Derived by ExpertStore:
  uint64_t expert_bytes = 0;    // payload bytes of one expert (3 parts)
  uint64_t slot_bytes = 0;      // bytes a cache slot needs: the aligned supersets of the 3 parts (worst case)
};

// Where every routed expert of a model lives: the files of a (split) model and, per layer, the
// location of its gate/up/down tensors.
struct ExpertLayout {
  std::vector<std::string> files;     // [n_file] paths
  std::vector<uint64_t> file_sizes;   // [n_file] bytes
  std::vector<ExpertLayer> layers;    // [n_layer]; n_expert 0 for dense layers
};

// One read needed to bring a part in: [aligned_offset, aligned_offset + aligned_len) of `file`,
// whose interior [offset, offset + len) is the payload.
struct PartRead {
  uint32_t file;
  uint64_t offset, len;
  uint64_t aligned_offset, aligned_len;
  uint64_t interior() const { return offset - aligned_offset; }
};

class ExpertStore {
 public:
  // Checks every part against its file (index, bounds) and derives the per-expert sizes.
  explicit ExpertStore(ExpertLayout layout);

  int n_layers() const { return static_cast<int>(layers_.size()); }
  const ExpertLayer& layer(int l) const { return layers_[l]; }
  bool is_moe(int l) const { return layers_[l].n_expert > 0; }
  const std::vector<std::string>& files() const { return files_; }
  const std::vector<uint64_t>& file_sizes() const { return file_sizes_; }

  PartRead part_read(int layer, int e, int part) const;
  uint64_t max_slot_bytes() const;

 private:
  std::vector<ExpertLayer> layers_;
  std::vector<std::string> files_;
  std::vector<uint64_t> file_sizes_;
};

inline uint64_t align_down(uint64_t x, uint64_t a) { return x / a * a; }
inline uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace strata
