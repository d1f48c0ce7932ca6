#include "model/kv_cache.h"

#include <cstring>

#include "core/error.h"
#include "kernels/kernel_table.h"
#include "kernels/quants.h"

namespace strata {

KvCache::KvCache(const ModelConfig& cfg, const KvCacheOptions& opt) : opt_(opt) {
  STRATA_CHECK(opt.n_ctx > 0 && opt.n_seq > 0, "KV cache needs a positive context ({}) and sequence count ({})", opt.n_ctx, opt.n_seq);
  for (GgmlType t : {opt.type_k, opt.type_v})
    STRATA_CHECK(t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::Q8_0, "unsupported KV cache type {} (f32, f16 or q8_0)",
                 ggml_type_name(t));
  layers_.resize(cfg.layers.size());
  for (size_t l = 0; l < cfg.layers.size(); ++l) {
    const LayerConfig& lc = cfg.layers[l];
    Layer& L = layers_[l];
    if (lc.attn == AttnKind::Mla || lc.attn == AttnKind::MlaSparse) {
      L.k_width = lc.kv_lora_rank + lc.qk_rope_dim;
      L.v_width = 0;
    } else if (lc.attn == AttnKind::DeltaNet) {
      L.k_width = L.v_width = 0;  // recurrent state instead of rows (KvCache::ext())
    } else if (lc.attn == AttnKind::SharedKv) {
      L.k_width = lc.head_dim_k;
      L.v_width = 0;
    } else {
      L.k_width = lc.n_head_kv * lc.head_dim_k;
      L.v_width = lc.n_head_kv * lc.head_dim_v;
    }
    auto row_bytes = [&](GgmlType t, int w) -> size_t {
      if (w == 0) return 0;
      STRATA_CHECK(w % ggml_info(t).block_size == 0, "KV row width {} of layer {} is not a multiple of the {} block size", w, l, ggml_type_name(t));
      return ggml_row_size(t, static_cast<uint64_t>(w));
    };
    L.k_row = row_bytes(opt.type_k, L.k_width);
    L.v_row = row_bytes(opt.type_v, L.v_width);
    const size_t n_rows = static_cast<size_t>(opt.n_ctx) * static_cast<size_t>(opt.n_seq);
    L.k = ZeroBuffer(n_rows * L.k_row);
    L.v = ZeroBuffer(n_rows * L.v_row);
    bytes_ += L.k.size() + L.v.size();
  }
}

void KvCache::store_row(GgmlType t, const float* src, uint8_t* dst, int n) const {
  if (t == GgmlType::F32) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
  else quantize_row(t, src, dst, n);
}

void KvCache::read_rows(GgmlType t, const uint8_t* src, size_t row, int n_rows, int width, float* out) const {
  if (t == GgmlType::F32) {
    std::memcpy(out, src, static_cast<size_t>(n_rows) * row);
    return;
  }
  const ToFloatFn deq = kernels().dequantize[static_cast<uint32_t>(t)];
  for (int r = 0; r < n_rows; ++r) deq(src + static_cast<size_t>(r) * row, out + static_cast<size_t>(r) * width, width);
}

void KvCache::read_slice(GgmlType t, const uint8_t* row, int off, int width, float* out) const {
  const auto& ti = ggml_info(t);
  if (off % ti.block_size != 0 || width % ti.block_size != 0) {
    // A head not aligned to the cache type's blocks: the row up to the slice, then move it.
    const int upto = (off + width + ti.block_size - 1) / ti.block_size * ti.block_size;
    kernels().dequantize[static_cast<uint32_t>(t)](row, out, upto);
    std::memmove(out, out + off, static_cast<size_t>(width) * sizeof(float));
    return;
  }
  const uint8_t* src = row + static_cast<size_t>(off / ti.block_size) * ti.type_size;
  if (t == GgmlType::F32) std::memcpy(out, src, static_cast<size_t>(width) * 4);
  else kernels().dequantize[static_cast<uint32_t>(t)](src, out, width);
}

void KvCache::read_k_slice(int l, int seq, int pos, int off, int width, float* out) const {
  read_slice(opt_.type_k, k_row(l, seq, pos), off, width, out);
}

void KvCache::read_v_slice(int l, int seq, int pos, int off, int width, float* out) const {
  read_slice(opt_.type_v, v_row(l, seq, pos), off, width, out);
}

void KvCache::store(int l, int seq, int pos, const float* k, const float* v) {
  Layer& L = layers_[l];
  const size_t idx = static_cast<size_t>(seq) * opt_.n_ctx + pos;
  store_row(opt_.type_k, k, L.k.data() + idx * L.k_row, L.k_width);
  if (L.v_width) store_row(opt_.type_v, v, L.v.data() + idx * L.v_row, L.v_width);
}

void KvCache::read_k(int l, int seq, int p0, int p1, float* out) const {
  const Layer& L = layers_[l];
  const size_t idx = static_cast<size_t>(seq) * opt_.n_ctx + p0;
  read_rows(opt_.type_k, L.k.data() + idx * L.k_row, L.k_row, p1 - p0, L.k_width, out);
}

const uint8_t* KvCache::k_row(int l, int seq, int pos) const {
  const Layer& L = layers_[l];
  return L.k.data() + (static_cast<size_t>(seq) * opt_.n_ctx + pos) * L.k_row;
}

const uint8_t* KvCache::v_row(int l, int seq, int pos) const {
  const Layer& L = layers_[l];
  return L.v.data() + (static_cast<size_t>(seq) * opt_.n_ctx + pos) * L.v_row;
}

std::span<uint8_t> KvCache::k_bytes(int l, int seq, int n) {
  Layer& L = layers_[static_cast<size_t>(l)];
  STRATA_CHECK(seq >= 0 && seq < opt_.n_seq && n >= 0 && n <= opt_.n_ctx, "KV rows [0, {}) of sequence {} are outside the cache", n, seq);
  if (L.k_row == 0) return {};
  return {L.k.data() + static_cast<size_t>(seq) * opt_.n_ctx * L.k_row, static_cast<size_t>(n) * L.k_row};
}

std::span<uint8_t> KvCache::v_bytes(int l, int seq, int n) {
  Layer& L = layers_[static_cast<size_t>(l)];
  STRATA_CHECK(seq >= 0 && seq < opt_.n_seq && n >= 0 && n <= opt_.n_ctx, "KV rows [0, {}) of sequence {} are outside the cache", n, seq);
  if (L.v_row == 0) return {};
  return {L.v.data() + static_cast<size_t>(seq) * opt_.n_ctx * L.v_row, static_cast<size_t>(n) * L.v_row};
}

const uint16_t* KvCache::k_f16(int l, int seq, int pos) const {
  return opt_.type_k == GgmlType::F16 ? reinterpret_cast<const uint16_t*>(k_row(l, seq, pos)) : nullptr;
}
const uint16_t* KvCache::v_f16(int l, int seq, int pos) const {
  return opt_.type_v == GgmlType::F16 ? reinterpret_cast<const uint16_t*>(v_row(l, seq, pos)) : nullptr;
}
const float* KvCache::k_f32(int l, int seq, int pos) const {
  return opt_.type_k == GgmlType::F32 ? reinterpret_cast<const float*>(k_row(l, seq, pos)) : nullptr;
}
const float* KvCache::v_f32(int l, int seq, int pos) const {
  return opt_.type_v == GgmlType::F32 ? reinterpret_cast<const float*>(v_row(l, seq, pos)) : nullptr;
}

}  // namespace strata
