#pragma once
// KV cache: per layer and per sequence slot, one row per position (row index = position).
// GQA layers store K [n_ctx, n_head_kv*head_dim_k] and V [n_ctx, n_head_kv*head_dim_v];
// MLA layers (sparse or not) store only the compressed latent + rope key [n_ctx, kv_lora_rank + rope_dim]
// (V is a view of its first kv_lora_rank values); SharedKv layers (DeepSeek-V4) store one
// vector per token that is both K and V [n_ctx, head_dim_k]. Rows are f32, f16 or q8_0.
// Architectures with extra per-sequence state (DeepSeek-V4's compressed blocks) keep it in ext().
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/zero_buffer.h"
#include "gguf/ggml_type.h"
#include "model/config.h"

namespace strata {

struct KvCacheOptions {
  int n_ctx = 0;               // positions per sequence
  int n_seq = 1;               // sequence slots
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
};

// Architecture-specific per-sequence state (and its scratch), created with its full capacity by
// Model::prepare so that it never grows during passes; counted in KvCache::bytes().
struct KvCacheExt {
  virtual ~KvCacheExt() = default;
  virtual uint64_t bytes() const = 0;  // what it holds now (capacities)
  // Slot files (runtime/slot_file.h): the name of this state's kind ("": it cannot be saved), and
  // the regions of this object that hold sequence `seq`'s state after n positions, appended to
  // `out` in a fixed order (a save writes them, a restore fills them). Throws where the state does
  // not describe n positions.
  virtual const char* slot_kind() const { return ""; }
  virtual void seq_regions(int seq, int n, std::vector<std::span<uint8_t>>& out) {
    (void)seq, (void)n, (void)out;
  }
};

class KvCache {
 public:
  KvCache(const ModelConfig& cfg, const KvCacheOptions& opt);

  int n_ctx() const { return opt_.n_ctx; }
  int n_seq() const { return opt_.n_seq; }
  GgmlType type_k() const { return opt_.type_k; }
  GgmlType type_v() const { return opt_.type_v; }
  uint64_t bytes() const { return bytes_ + (ext_ ? ext_->bytes() : 0); }  // rows + ext()

  // Row widths (values) of layer l.
  int k_width(int l) const { return layers_[l].k_width; }
  int v_width(int l) const { return layers_[l].v_width; }  // 0 for MLA / SharedKv (V lives in K)

  // Stores one position's K (and V) values (f32, converted to the cache type).
  void store(int l, int seq, int pos, const float* k, const float* v);
  // Reads positions [p0, p1) of K as f32 into out [(p1-p0), width].
  void read_k(int l, int seq, int p0, int p1, float* out) const;
  // Reads values [off, off+width) of one position's K (or V) row as f32 (one head's slice).
  // out must hold the whole row when the slice is not aligned to the cache type's blocks.
  void read_k_slice(int l, int seq, int pos, int off, int width, float* out) const;
  void read_v_slice(int l, int seq, int pos, int off, int width, float* out) const;
  // Direct f32 view when the cache type is f32 (nullptr otherwise).
  const float* k_f32(int l, int seq, int pos) const;
  const float* v_f32(int l, int seq, int pos) const;
  // f16 caches: the row itself (nullptr for another type).
  const uint16_t* k_f16(int l, int seq, int pos) const;
  const uint16_t* v_f16(int l, int seq, int pos) const;

  // Slot files: the stored bytes of positions [0, n) of sequence `seq` in layer l, in the cache's
  // own type (one contiguous block each; V is empty where the layer keeps none).
  int n_layer() const { return static_cast<int>(layers_.size()); }
  std::span<uint8_t> k_bytes(int l, int seq, int n);
  std::span<uint8_t> v_bytes(int l, int seq, int n);

  // Forget a sequence (positions are simply overwritten later).
  void clear(int seq) { (void)seq; }

  std::unique_ptr<KvCacheExt>& ext() { return ext_; }
  const std::unique_ptr<KvCacheExt>& ext() const { return ext_; }

 private:
  struct Layer {
    int k_width = 0, v_width = 0;
    size_t k_row = 0, v_row = 0;  // bytes per row
    ZeroBuffer k, v;              // [n_seq, n_ctx, row]; pages are touched as positions are written
  };
  void store_row(GgmlType t, const float* src, uint8_t* dst, int n) const;
  void read_rows(GgmlType t, const uint8_t* src, size_t row, int n_rows, int width, float* out) const;
  void read_slice(GgmlType t, const uint8_t* row, int off, int width, float* out) const;
  const uint8_t* k_row(int l, int seq, int pos) const;  // the stored row of (layer, sequence, position)
  const uint8_t* v_row(int l, int seq, int pos) const;
  KvCacheOptions opt_;
  std::vector<Layer> layers_;
  uint64_t bytes_ = 0;
  std::unique_ptr<KvCacheExt> ext_;
};

}  // namespace strata
