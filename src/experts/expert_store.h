#pragma once
// Where every routed expert's bytes live, by formula: a MoE layer's gate/up/down tensors are
// [n_expert, rows, cols], so expert e of a part starts at tensor_offset + e * stride in the
// part's file (split models included). No index table, no conversion step.
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/ggml_type.h"

namespace strata {

class GgufModel;
struct ModelConfig;
struct ModelWeights;

inline constexpr uint64_t kIoAlign = 4096;  // O_DIRECT: offset, length and buffer alignment

struct ExpertPart {
  GgmlType type = GgmlType::F32;
  int64_t rows = 0, cols = 0;
  uint32_t file = 0;        // split part index
  uint64_t offset = 0;      // absolute offset of expert 0 in that file
  uint64_t stride = 0;      // bytes of one expert's matrix
  uint64_t row_bytes = 0;
};

struct ExpertLayer {
  int n_expert = 0;             // 0: not a MoE layer
  ExpertPart part[3];           // gate, up, down
  uint64_t expert_bytes = 0;    // payload bytes of one expert (3 parts)
  uint64_t slot_bytes = 0;      // bytes a cache slot needs: the aligned supersets of the 3 parts (worst case)
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
  ExpertStore(const GgufModel& m, const ModelConfig& cfg, const ModelWeights& w);

  int n_layers() const { return static_cast<int>(layers_.size()); }
  const ExpertLayer& layer(int l) const { return layers_[l]; }
  bool is_moe(int l) const { return layers_[l].n_expert > 0; }
  const std::vector<std::string>& files() const { return files_; }
  const std::vector<uint64_t>& file_sizes() const { return file_sizes_; }

  PartRead part_read(int layer, int e, int part) const;
  uint64_t total_expert_bytes() const { return total_bytes_; }
  int64_t total_experts() const { return total_experts_; }
  uint64_t max_slot_bytes() const;

 private:
  std::vector<ExpertLayer> layers_;
  std::vector<std::string> files_;
  std::vector<uint64_t> file_sizes_;
  uint64_t total_bytes_ = 0;
  int64_t total_experts_ = 0;
};

inline uint64_t align_down(uint64_t x, uint64_t a) { return x / a * a; }
inline uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace strata
