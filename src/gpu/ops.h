#pragma once
// The kernels of the GPU tier on a Device: matrix-vector products over weights of the supported
// types, RMSNorm, RoPE, softmax and SwiGLU on f32 activations in device buffers. Each call
// records dispatches into the device's command stream; Device::submit() (or a download) runs them.
// Checked against the CPU kernels on lavapipe (tests/gpu): normalized error per type.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/ggml_type.h"
#include "gguf/qmatrix.h"
#include "gpu/device.h"

namespace strata::gpu {

// Weight types matvec runs: F32, F16, BF16, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4.
bool matvec_supported(GgmlType t);
std::span<const GgmlType> matvec_types();  // every type matvec runs
std::string matvec_supported_list();  // "f32, f16, ..." for errors

// A weight matrix in device memory, its rows split into parts of at most Device::max_range()
// bytes (one binding each); row r lives in part r / rows_per_part.
struct DeviceMatrix {
  std::string name;  // the tensor's name, for errors
  GgmlType type = GgmlType::F32;
  int64_t rows = 0, cols = 0;
  uint64_t row_bytes = 0;     // ggml_row_size(type, cols): rows are packed on the device
  int64_t rows_per_part = 0;
  std::vector<Buffer> parts;  // [ceil(rows / rows_per_part)]
};
// Uploads `w` (rows packed, any row stride on the host). Throws strata::Error naming `name` for a
// type matvec does not run, or one row larger than the storage range.
DeviceMatrix upload_matrix(Device& dev, const QMatrix& w, std::string_view name);

// A weight matrix inside a larger device buffer (a routed expert in a VRAM cache slot): `rows` rows
// of `row_bytes` packed from w.offset (a multiple of the device's min_storage_offset_align), within
// one binding's range.
struct MatrixView {
  std::string_view name;
  GgmlType type = GgmlType::F32;
  int64_t rows = 0, cols = 0;
  uint64_t row_bytes = 0;
  BufRange w;
};

// An f32 tensor in device memory (activations, norm weights, rope tables).
Buffer upload_f32(Device& dev, const float* x, int64_t n, std::string_view name);
void download_f32(Device& dev, const Buffer& b, float* x, int64_t n);

// Causal grouped-query attention (ops.attention).
struct AttnShape {
  int n_head = 0, n_head_kv = 0;  // n_head a multiple of n_head_kv
  int head_dim_k = 0, head_dim_v = 0;
  int n_keys = 0;                 // positions 0..n_keys-1 a token may see; every pos[t] < n_keys
  int window = 0;                 // sliding window (keys pos - window < j <= pos); 0: none
  float scale = 1.0f;             // on q . k
  int kv_rows = 0;                // K/V rows bound (0: n_keys); with sequence bases, n_seq * n_ctx
  GgmlType type_k = GgmlType::F32, type_v = GgmlType::F32;  // the cache's types (kv_cache_supported)
};

// KV cache types the device holds: F32, F16 (rounded to nearest even, as the CPU's cache) and
// Q8_0 (the CPU's reference quantizer; on the device as int8 quants, then an f32 scale per block).
bool kv_cache_supported(GgmlType t);
// Bytes of one KV row of `width` values of type t.
uint64_t kv_row_bytes(GgmlType t, int64_t width);
// Attention scratch: the tokens one dispatch covers (every pass is split into dispatches of at
// most this many tokens) for a scratch of `scratch_floats`, and the floats a scratch needs for
// `n_tok` tokens at most, kAttnScratchBytes at most unless one token alone needs more.
inline constexpr uint64_t kAttnScratchBytes = 64ull << 20;
int64_t attention_tokens_per_dispatch(uint64_t scratch_floats, int n_head, int n_keys);
uint64_t attention_scratch_floats(int64_t n_tok, int n_head, int n_keys);

// Device bytes of a weight matrix as upload_matrix places it (each part rounded up to `align`,
// the allocation granularity planned; parts of at most `max_range` bytes).
uint64_t matrix_device_bytes(GgmlType t, int64_t rows, int64_t cols, uint64_t max_range, uint64_t align);

class Ops {
 public:
  explicit Ops(Device& dev);
  Device& device() { return dev_; }
  // y [n_tok, w.rows] = x [n_tok, w.cols] * W^T.
  void matvec(const DeviceMatrix& w, const Buffer& x, int64_t n_tok, const Buffer& y);
  // The same over a matrix view, x and y ranges of larger buffers (offsets aligned as bindings need).
  void matvec(const MatrixView& w, const BufRange& x, int64_t n_tok, const BufRange& y);
  // y [rows, cols] = x rounded as the CPU quantizes activations of type `act` (the weight type's
  // vec_dot_type: Q8_0, Q8_1, Q8_K, F16 or BF16; cols a multiple of its block), back in f32, so
  // that a product over y is the CPU path's within rounding. F32: y = x.
  void act_quant(const Buffer& x, const Buffer& y, int64_t cols, int64_t rows, GgmlType act);
  void act_quant(const BufRange& x, const BufRange& y, int64_t cols, int64_t rows, GgmlType act);
  // y [rows, n] = rmsnorm(x [rows, n]) * w [n] (w may be null: no weight). y may be x.
  void rmsnorm(const Buffer& x, const Buffer* w, const Buffer& y, int64_t n, int64_t rows, float eps);
  // In place on x [n_tok, n_heads, head_dim]; cs [n_tok, n_dims]: rope_cache of each token's position.
  void rope(const Buffer& x, const Buffer& cs, int head_dim, int n_heads, int n_dims, bool neox, int64_t n_tok);
  // In place on x [rows, n]: softmax(x * scale), with an optional sink logit per call.
  void softmax(const Buffer& x, int64_t n, int64_t rows, float scale, const float* sink = nullptr);
  // out [n] = silu(g) * u.
  void swiglu(const Buffer& g, const Buffer& u, const Buffer& out, int64_t n);
  // x [n] += y [n].
  void add(const Buffer& x, const Buffer& y, int64_t n);
  // x [rows, width] += b [width] on every row.
  void add_bias(const Buffer& x, const Buffer& b, int64_t width, int64_t rows);
  // y [rows, width] = columns off..off+width-1 of x [rows, stride].
  void strided_copy(const Buffer& x, const Buffer& y, int64_t width, int64_t stride, int64_t off, int64_t rows);
  // x [rows, width] *= sigmoid(g): per_value: g [rows, stride], value j of a row gated by g[row, off + j];
  // else g [rows, stride], every value of a row gated by g[row, off].
  void mul_sigmoid(const Buffer& x, const Buffer& g, int64_t width, int64_t rows, int64_t stride, int64_t off, bool per_value);
  // KV rows by position: cache row pos[t] = src [t, width] in the cache's type (F32; F16: width
  // even; Q8_0: width a multiple of 32, the cache exactly its rows); pos: n_tok uint32.
  void kv_store(const Buffer& src, const Buffer& pos, const Buffer& cache, int64_t width, int64_t n_tok, GgmlType type = GgmlType::F32);
  // out [n_tok, n_head, dv] = softmax(scale q K^T) V for token t over positions 0..pos[t] (within
  // the window); q [n_tok, n_head, dk]; k [kv_rows, n_kv, dk], v [kv_rows, n_kv, dv]; sinks: [n_head]
  // logits that join each head's softmax, or null; scratch: at least n_head * n_keys floats (the
  // tokens go in dispatches of as many as it holds: attention_tokens_per_dispatch);
  // base: n_tok uint32, the row of K/V where token t's sequence starts (position j is row base[t] + j;
  // rows past kv_rows are not read), or null: one sequence, position j is row j.
  void attention(const Buffer& q, const Buffer& k, const Buffer& v, const Buffer& pos, const Buffer* sinks, const Buffer& out,
                 const Buffer& scratch, const AttnShape& a, int64_t n_tok, const Buffer* base = nullptr);

 private:
  const Pipeline& get(std::string_view name, uint32_t n_buffers, uint32_t push_bytes, bool wg_spec, std::span<const uint32_t> more_spec = {});
  void matvec_part(GgmlType type, int64_t cols, int64_t rows, uint64_t row_bytes, int64_t r0, int64_t total_rows, const BufRange& w,
                   const BufRange& x, int64_t n_tok, const BufRange& y);
  Device& dev_;
  uint32_t wg_ = 64;  // threads per workgroup of the reducing shaders
};

}  // namespace strata::gpu
