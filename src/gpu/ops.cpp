#include "gpu/ops.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "core/units.h"
#include "gpu/shaders.h"

namespace strata::gpu {

namespace {
constexpr GgmlType kMatvecTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                     GgmlType::Q8_0, GgmlType::Q4_K,
                                     GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4};
constexpr uint32_t kMaxGroups = 65535;  // per grid dimension (the minimum every device offers)
constexpr uint32_t kMatmatTokens = 8;   // tokens per matvec workgroup when there are several (matvec.comp's kMaxNt)

// Grid for `n` workgroups along x, overflowing into y (the shaders rebuild the index).
std::array<uint32_t, 2> grid(uint64_t n) {
  const uint32_t gx = static_cast<uint32_t>(std::min<uint64_t>(n, kMaxGroups));
  const uint32_t gy = static_cast<uint32_t>((n + kMaxGroups - 1) / kMaxGroups);
  return {gx, gy};
}
}  // namespace

std::span<const GgmlType> matvec_types() { return kMatvecTypes; }

bool matvec_supported(GgmlType t) { return std::find(std::begin(kMatvecTypes), std::end(kMatvecTypes), t) != std::end(kMatvecTypes); }

std::string matvec_supported_list() {
  std::string s;
  for (GgmlType t : kMatvecTypes) s += std::string(s.empty() ? "" : ", ") + ggml_type_name(t);
  return s;
}

DeviceMatrix upload_matrix(Device& dev, const QMatrix& w, std::string_view name) {
  if (!matvec_supported(w.type))
    fail("GPU: tensor {} is {}, which the Vulkan kernels do not run yet (they run {})", name, ggml_type_name(w.type), matvec_supported_list());
  const int block = ggml_info(w.type).block_size;
  STRATA_CHECK(w.rows > 0 && w.cols > 0 && w.cols % block == 0, "GPU: tensor {} has {} x {} values ({} needs columns in blocks of {})", name,
               w.rows, w.cols, ggml_type_name(w.type), block);
  DeviceMatrix m;
  m.name = std::string(name);
  m.type = w.type;
  m.rows = w.rows;
  m.cols = w.cols;
  m.row_bytes = ggml_row_size(w.type, static_cast<uint64_t>(w.cols));
  STRATA_CHECK(m.row_bytes <= dev.max_range(), "GPU: one row of tensor {} is {}, more than the device's storage range {}", name,
               format_bytes(m.row_bytes), format_bytes(dev.max_range()));
  STRATA_CHECK(w.row_stride_bytes >= m.row_bytes, "GPU: tensor {}: row stride {} below the row size {}", name, w.row_stride_bytes, m.row_bytes);
  // Byte offsets in the shaders are 32-bit: a part also stays below 4 GiB.
  const uint64_t range = std::min<uint64_t>(dev.max_range(), 0xFFFFFFF0ull);
  m.rows_per_part = static_cast<int64_t>(std::min<uint64_t>(range / m.row_bytes, static_cast<uint64_t>(w.rows)));
  std::vector<uint8_t> packed;
  for (int64_t r0 = 0; r0 < w.rows; r0 += m.rows_per_part) {
    const int64_t n = std::min(m.rows_per_part, w.rows - r0);
    const uint64_t bytes = static_cast<uint64_t>(n) * m.row_bytes;
    Buffer b = dev.alloc(bytes, fmt::format("{} (rows {}..{})", name, r0, r0 + n));
    if (w.row_stride_bytes == m.row_bytes) {
      dev.upload(b, 0, w.row(r0), bytes);
    } else {
      packed.resize(bytes);
      for (int64_t r = 0; r < n; ++r) std::copy_n(w.row(r0 + r), m.row_bytes, packed.data() + r * m.row_bytes);
      dev.upload(b, 0, packed.data(), bytes);
    }
    m.parts.push_back(std::move(b));
  }
  return m;
}

Buffer upload_f32(Device& dev, const float* x, int64_t n, std::string_view name) {
  Buffer b = dev.alloc(static_cast<uint64_t>(n) * 4, name);
  if (x) dev.upload(b, 0, x, static_cast<uint64_t>(n) * 4);
  return b;
}

void download_f32(Device& dev, const Buffer& b, float* x, int64_t n) { dev.download(b, 0, x, static_cast<uint64_t>(n) * 4); }

Ops::Ops(Device& dev) : dev_(dev) {
  // 64 threads, or fewer where a device offers fewer (every device Strata opens has 256).
  wg_ = std::min<uint32_t>(64, dev.info().max_invocations);
}

const Pipeline& Ops::get(std::string_view name, uint32_t n_buffers, uint32_t push_bytes, bool wg_spec, std::span<const uint32_t> more_spec) {
  // Specialization constants: [WG,] then more_spec (ids in that order).
  std::vector<uint32_t> spec;
  if (wg_spec) spec.push_back(wg_);
  spec.insert(spec.end(), more_spec.begin(), more_spec.end());
  return dev_.pipeline(name, shader_spirv(name), n_buffers, push_bytes, spec);
}

bool kv_cache_supported(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::Q8_0; }

uint64_t kv_row_bytes(GgmlType t, int64_t width) {
  STRATA_CHECK(kv_cache_supported(t), "GPU KV cache: type {} (the device holds f32, f16 or q8_0)", ggml_type_name(t));
  const uint64_t w = static_cast<uint64_t>(width);
  return t == GgmlType::Q8_0 ? w + w / 32 * 4 : w * (t == GgmlType::F16 ? 2 : 4);  // q8_0: quants and an f32 scale per 32
}

namespace {
uint32_t kv_type_id(GgmlType t) { return t == GgmlType::Q8_0 ? 2u : t == GgmlType::F16 ? 1u : 0u; }
// Whether a row of `width` values of type t is whole words (and whole blocks).
bool kv_width_ok(GgmlType t, int64_t width) { return t == GgmlType::Q8_0 ? width % 32 == 0 : t == GgmlType::F16 ? width % 2 == 0 : true; }
}  // namespace

int64_t attention_tokens_per_dispatch(uint64_t scratch_floats, int n_head, int n_keys) {
  const uint64_t per_tok = static_cast<uint64_t>(std::max(n_head, 1)) * static_cast<uint64_t>(std::max(n_keys, 1));
  return static_cast<int64_t>(std::min<uint64_t>(scratch_floats / per_tok, kMaxGroups));
}

uint64_t attention_scratch_floats(int64_t n_tok, int n_head, int n_keys) {
  const uint64_t per_tok = static_cast<uint64_t>(std::max(n_head, 1)) * static_cast<uint64_t>(std::max(n_keys, 1));
  const uint64_t fit = std::max<uint64_t>(1, kAttnScratchBytes / 4 / per_tok);
  return per_tok * std::min<uint64_t>({static_cast<uint64_t>(std::max<int64_t>(n_tok, 1)), fit, kMaxGroups});
}

uint64_t matrix_device_bytes(GgmlType t, int64_t rows, int64_t cols, uint64_t max_range, uint64_t align) {
  const uint64_t row_bytes = ggml_row_size(t, static_cast<uint64_t>(cols));
  const uint64_t range = std::min<uint64_t>(max_range, 0xFFFFFFF0ull);  // as upload_matrix
  if (rows <= 0 || row_bytes == 0 || row_bytes > range) return 0;
  const uint64_t per_part = std::min<uint64_t>(range / row_bytes, static_cast<uint64_t>(rows));
  const uint64_t full = static_cast<uint64_t>(rows) / per_part, rest = static_cast<uint64_t>(rows) % per_part;
  auto up = [&](uint64_t b) { return (std::max<uint64_t>(b, 4) + align - 1) / align * align; };
  return full * up(per_part * row_bytes) + (rest ? up(rest * row_bytes) : 0);
}

void Ops::matvec(const DeviceMatrix& w, const Buffer& x, int64_t n_tok, const Buffer& y) {
  STRATA_CHECK(n_tok >= 1 && n_tok <= kMaxGroups, "GPU matvec {}: {} tokens (1..{})", w.name, n_tok, kMaxGroups);
  STRATA_CHECK(x.bytes() >= static_cast<uint64_t>(n_tok * w.cols) * 4, "GPU matvec {}: x holds {} bytes, {} tokens of {} need more", w.name,
               x.bytes(), n_tok, w.cols);
  STRATA_CHECK(y.bytes() >= static_cast<uint64_t>(n_tok * w.rows) * 4, "GPU matvec {}: y holds {} bytes, {} tokens of {} rows need more",
               w.name, y.bytes(), n_tok, w.rows);
  for (size_t part = 0; part < w.parts.size(); ++part) {
    const int64_t r0 = static_cast<int64_t>(part) * w.rows_per_part;
    const int64_t rows = std::min(w.rows_per_part, w.rows - r0);
    matvec_part(w.type, w.cols, rows, w.row_bytes, r0, w.rows, {&w.parts[part]}, {&x}, n_tok, {&y});
  }
}

void Ops::matvec(const MatrixView& w, const BufRange& x, int64_t n_tok, const BufRange& y) {
  auto room = [](const BufRange& r) { return (r.bytes ? r.bytes : r.buf->bytes() - std::min(r.offset, r.buf->bytes())); };
  const uint64_t align = std::max<uint64_t>(dev_.info().min_storage_offset_align, 4);
  STRATA_CHECK(n_tok >= 1 && n_tok <= kMaxGroups && w.w.buf && x.buf && y.buf, "GPU matvec {}: {} tokens (1..{})", w.name, n_tok, kMaxGroups);
  STRATA_CHECK(w.w.offset % align == 0 && x.offset % align == 0 && y.offset % align == 0, "GPU matvec {}: a binding offset is not a multiple of {}",
               w.name, align);
  STRATA_CHECK(room(w.w) >= static_cast<uint64_t>(w.rows) * w.row_bytes && static_cast<uint64_t>(w.rows) * w.row_bytes <= dev_.max_range(),
               "GPU matvec {}: {} rows of {} bytes do not fit its range", w.name, w.rows, w.row_bytes);
  STRATA_CHECK(room(x) >= static_cast<uint64_t>(n_tok * w.cols) * 4 && room(y) >= static_cast<uint64_t>(n_tok * w.rows) * 4,
               "GPU matvec {}: x or y holds fewer than {} tokens", w.name, n_tok);
  matvec_part(w.type, w.cols, w.rows, w.row_bytes, 0, w.rows, {w.w.buf, w.w.offset, static_cast<uint64_t>(w.rows) * w.row_bytes}, x, n_tok, y);
}

// One binding of weight rows r0..r0+rows-1 (of total_rows) times n_tok tokens.
void Ops::matvec_part(GgmlType type, int64_t cols, int64_t rows, uint64_t row_bytes, int64_t r0, int64_t total_rows, const BufRange& w,
                      const BufRange& x, int64_t n_tok, const BufRange& y) {
  std::string name = std::string("matvec_") + ggml_type_name(type);
  // Several tokens: kMatmatTokens per workgroup, each weight block read once for all of them (the
  // matrix-matrix form; per token the same sums in the same order as one token alone).
  const uint32_t nt = n_tok > 1 ? kMatmatTokens : 1;
  const uint32_t spec[1] = {nt};
  const Pipeline& p = get(name, 3, 7 * 4, true, spec);
  const uint32_t push[7] = {static_cast<uint32_t>(cols), static_cast<uint32_t>(rows), static_cast<uint32_t>(row_bytes),
                            static_cast<uint32_t>(cols), static_cast<uint32_t>(r0), static_cast<uint32_t>(total_rows),
                            static_cast<uint32_t>(n_tok)};
  const BufRange b[3] = {w, x, y};
  const auto g = grid(static_cast<uint64_t>(rows));
  dev_.dispatch(p, b, push, g[0], g[1], static_cast<uint32_t>((n_tok + nt - 1) / nt));
}

void Ops::rmsnorm(const Buffer& x, const Buffer* w, const Buffer& y, int64_t n, int64_t rows, float eps) {
  STRATA_CHECK(rows >= 1 && rows <= kMaxGroups && n >= 1, "GPU rmsnorm: {} rows of {}", rows, n);
  const Pipeline& p = get("rmsnorm", 3, 12, true);
  struct {
    uint32_t n, has_w;
    float eps;
  } push{static_cast<uint32_t>(n), w ? 1u : 0u, eps};
  const BufRange b[3] = {{&x}, {w ? w : &x}, {&y}};
  dev_.dispatch(p, b, &push, static_cast<uint32_t>(rows));
}

void Ops::rope(const Buffer& x, const Buffer& cs, int head_dim, int n_heads, int n_dims, bool neox, int64_t n_tok) {
  STRATA_CHECK(n_dims > 0 && n_dims % 2 == 0 && n_dims <= head_dim && n_heads >= 1 && n_tok >= 1 && n_tok <= kMaxGroups,
               "GPU rope: {} rotated of {} per head, {} heads, {} tokens", n_dims, head_dim, n_heads, n_tok);
  const Pipeline& p = get("rope", 2, 20, false);
  const uint32_t push[5] = {static_cast<uint32_t>(head_dim), static_cast<uint32_t>(n_heads), static_cast<uint32_t>(n_dims), neox ? 1u : 0u,
                            static_cast<uint32_t>(n_tok)};
  const BufRange b[2] = {{&x}, {&cs}};
  dev_.dispatch(p, b, push, static_cast<uint32_t>((n_dims / 2 + 63) / 64), static_cast<uint32_t>(n_heads), static_cast<uint32_t>(n_tok));
}

void Ops::softmax(const Buffer& x, int64_t n, int64_t rows, float scale, const float* sink) {
  STRATA_CHECK(rows >= 1 && rows <= kMaxGroups && n >= 1, "GPU softmax: {} rows of {}", rows, n);
  const Pipeline& p = get("softmax", 1, 16, true);
  struct {
    uint32_t n;
    float scale;
    uint32_t has_sink;
    float sink;
  } push{static_cast<uint32_t>(n), scale, sink ? 1u : 0u, sink ? *sink : 0.0f};
  const BufRange b[1] = {{&x}};
  dev_.dispatch(p, b, &push, static_cast<uint32_t>(rows));
}

void Ops::swiglu(const Buffer& g, const Buffer& u, const Buffer& out, int64_t n) {
  const Pipeline& p = get("swiglu", 3, 4, false);
  const uint32_t push[1] = {static_cast<uint32_t>(n)};
  const BufRange b[3] = {{&g}, {&u}, {&out}};
  const auto gr = grid(static_cast<uint64_t>((n + 63) / 64));
  dev_.dispatch(p, b, push, gr[0], gr[1]);
}

void Ops::add(const Buffer& x, const Buffer& y, int64_t n) {
  STRATA_CHECK(n >= 1 && x.bytes() >= static_cast<uint64_t>(n) * 4 && y.bytes() >= static_cast<uint64_t>(n) * 4, "GPU add: {} values", n);
  const Pipeline& p = get("add", 2, 4, false);
  const uint32_t push[1] = {static_cast<uint32_t>(n)};
  const BufRange b[2] = {{&x}, {&y}};
  const auto gr = grid(static_cast<uint64_t>((n + 63) / 64));
  dev_.dispatch(p, b, push, gr[0], gr[1]);
}

void Ops::add_bias(const Buffer& x, const Buffer& b, int64_t width, int64_t rows) {
  const int64_t n = width * rows;
  STRATA_CHECK(width >= 1 && rows >= 1 && n <= 0xFFFFFFFFll && x.bytes() >= static_cast<uint64_t>(n) * 4 &&
                   b.bytes() >= static_cast<uint64_t>(width) * 4,
               "GPU add_bias: {} rows of {}", rows, width);
  const Pipeline& p = get("add_bias", 2, 8, false);
  const uint32_t push[2] = {static_cast<uint32_t>(n), static_cast<uint32_t>(width)};
  const BufRange bufs[2] = {{&x}, {&b}};
  const auto gr = grid(static_cast<uint64_t>((n + 63) / 64));
  dev_.dispatch(p, bufs, push, gr[0], gr[1]);
}

void Ops::act_quant(const Buffer& x, const Buffer& y, int64_t cols, int64_t rows, GgmlType act) {
  STRATA_CHECK(x.bytes() >= static_cast<uint64_t>(cols * rows) * 4 && y.bytes() >= static_cast<uint64_t>(cols * rows) * 4,
               "GPU act_quant: {} rows of {} as {}", rows, cols, ggml_type_name(act));
  act_quant(BufRange{&x}, BufRange{&y}, cols, rows, act);
}

void Ops::act_quant(const BufRange& x, const BufRange& y, int64_t cols, int64_t rows, GgmlType act) {
  uint32_t mode = 0, block = 1;
  switch (act) {
    case GgmlType::Q8_0:
    case GgmlType::Q8_1: mode = 0, block = 32; break;
    case GgmlType::Q8_K: mode = 1, block = 256; break;
    case GgmlType::F16: mode = 2; break;
    case GgmlType::BF16: mode = 3; break;
    default: fail("GPU act_quant: activations of type {}", ggml_type_name(act));
  }
  const int64_t n = cols * rows;
  auto room = [](const BufRange& r) { return (r.bytes ? r.bytes : r.buf->bytes() - std::min(r.offset, r.buf->bytes())); };
  STRATA_CHECK(cols >= 1 && rows >= 1 && cols % block == 0 && n <= 0xFFFFFFFFll && room(x) >= static_cast<uint64_t>(n) * 4 &&
                   room(y) >= static_cast<uint64_t>(n) * 4,
               "GPU act_quant: {} rows of {} as {}", rows, cols, ggml_type_name(act));
  const uint32_t spec[1] = {mode};
  const Pipeline& p = get("act_quant", 2, 4, false, spec);
  const uint32_t push[1] = {static_cast<uint32_t>(n)};
  const BufRange b[2] = {x, y};
  const auto gr = grid(static_cast<uint64_t>((n / block + 63) / 64));
  dev_.dispatch(p, b, push, gr[0], gr[1]);
}

void Ops::strided_copy(const Buffer& x, const Buffer& y, int64_t width, int64_t stride, int64_t off, int64_t rows) {
  const int64_t n = width * rows;
  STRATA_CHECK(width >= 1 && rows >= 1 && off >= 0 && off + width <= stride && rows * stride <= 0xFFFFFFFFll &&
                   x.bytes() >= static_cast<uint64_t>(rows * stride) * 4 && y.bytes() >= static_cast<uint64_t>(n) * 4,
               "GPU strided_copy: {} rows of {} at {} in rows of {}", rows, width, off, stride);
  const Pipeline& p = get("strided_copy", 2, 16, false);
  const uint32_t push[4] = {static_cast<uint32_t>(n), static_cast<uint32_t>(width), static_cast<uint32_t>(stride), static_cast<uint32_t>(off)};
  const BufRange b[2] = {{&x}, {&y}};
  const auto gr = grid(static_cast<uint64_t>((n + 63) / 64));
  dev_.dispatch(p, b, push, gr[0], gr[1]);
}

void Ops::mul_sigmoid(const Buffer& x, const Buffer& g, int64_t width, int64_t rows, int64_t stride, int64_t off, bool per_value) {
  const int64_t n = width * rows;
  STRATA_CHECK(width >= 1 && rows >= 1 && off >= 0 && off + (per_value ? width : 1) <= stride && rows * stride <= 0xFFFFFFFFll &&
                   x.bytes() >= static_cast<uint64_t>(n) * 4 && g.bytes() >= static_cast<uint64_t>(rows * stride) * 4,
               "GPU mul_sigmoid: {} rows of {}, gates at {} in rows of {}", rows, width, off, stride);
  const Pipeline& p = get("mul_sigmoid", 2, 20, false);
  const uint32_t push[5] = {static_cast<uint32_t>(n), static_cast<uint32_t>(width), static_cast<uint32_t>(stride), static_cast<uint32_t>(off),
                            per_value ? 1u : 0u};
  const BufRange b[2] = {{&x}, {&g}};
  const auto gr = grid(static_cast<uint64_t>((n + 63) / 64));
  dev_.dispatch(p, b, push, gr[0], gr[1]);
}

void Ops::kv_store(const Buffer& src, const Buffer& pos, const Buffer& cache, int64_t width, int64_t n_tok, GgmlType type) {
  STRATA_CHECK(kv_cache_supported(type) && width >= 1 && kv_width_ok(type, width) && n_tok >= 1 && n_tok <= kMaxGroups &&
                   src.bytes() >= static_cast<uint64_t>(width * n_tok) * 4 && pos.bytes() >= static_cast<uint64_t>(n_tok) * 4,
               "GPU kv_store: {} rows of {} into a {} cache", n_tok, width, ggml_type_name(type));
  const uint32_t spec[1] = {kv_type_id(type)};
  const Pipeline& p = get("kv_store", 3, 12, false, spec);
  const uint64_t w = static_cast<uint64_t>(width);
  const uint64_t words = type == GgmlType::Q8_0 ? w / 32 : type == GgmlType::F16 ? w / 2 : w;  // invocations per row
  const uint32_t push[3] = {static_cast<uint32_t>(width), static_cast<uint32_t>(n_tok), static_cast<uint32_t>(cache.bytes() / kv_row_bytes(type, width))};
  const BufRange b[3] = {{&src}, {&pos}, {&cache}};
  dev_.dispatch(p, b, push, static_cast<uint32_t>((words + 63) / 64), static_cast<uint32_t>(n_tok));
}

void Ops::attention(const Buffer& q, const Buffer& k, const Buffer& v, const Buffer& pos, const Buffer* sinks, const Buffer& out,
                    const Buffer& scratch, const AttnShape& a, int64_t n_tok, const Buffer* base) {
  STRATA_CHECK(a.n_head >= 1 && a.n_head_kv >= 1 && a.n_head % a.n_head_kv == 0 && a.head_dim_k >= 1 && a.head_dim_v >= 1 &&
                   a.n_keys >= 1 && a.window >= 0 && a.kv_rows >= 0 && kv_cache_supported(a.type_k) && kv_cache_supported(a.type_v) &&
                   kv_width_ok(a.type_k, int64_t{a.n_head_kv} * a.head_dim_k) && kv_width_ok(a.type_v, int64_t{a.n_head_kv} * a.head_dim_v),
               "GPU attention: {} heads over {} KV heads, head sizes {}/{}, {} keys, K/V {}/{}", a.n_head, a.n_head_kv, a.head_dim_k,
               a.head_dim_v, a.n_keys, ggml_type_name(a.type_k), ggml_type_name(a.type_v));
  STRATA_CHECK(n_tok >= 1 && n_tok <= kMaxGroups && a.n_head <= static_cast<int>(kMaxGroups), "GPU attention: {} tokens", n_tok);
  const uint64_t nh = static_cast<uint64_t>(a.n_head), nkv = static_cast<uint64_t>(a.n_head_kv), nk = static_cast<uint64_t>(a.n_keys);
  const uint64_t rows = a.kv_rows > 0 ? static_cast<uint64_t>(a.kv_rows) : nk;
  const int64_t chunk = attention_tokens_per_dispatch(scratch.bytes() / 4, a.n_head, a.n_keys);
  STRATA_CHECK(q.bytes() >= static_cast<uint64_t>(n_tok) * nh * a.head_dim_k * 4 && k.bytes() >= rows * kv_row_bytes(a.type_k, nkv * a.head_dim_k) &&
                   v.bytes() >= rows * kv_row_bytes(a.type_v, nkv * a.head_dim_v) &&
                   out.bytes() >= static_cast<uint64_t>(n_tok) * nh * a.head_dim_v * 4 && chunk >= 1 &&
                   pos.bytes() >= static_cast<uint64_t>(n_tok) * 4 && (!sinks || sinks->bytes() >= nh * 4) &&
                   (!base || base->bytes() >= static_cast<uint64_t>(n_tok) * 4),
               "GPU attention: a buffer is smaller than {} tokens x {} heads over {} keys ({} K/V rows) need", n_tok, a.n_head, a.n_keys, rows);
  // q8_0: the scales follow the quants of all `rows` rows, so the buffer holds exactly those rows.
  STRATA_CHECK((a.type_k != GgmlType::Q8_0 || k.bytes() == rows * kv_row_bytes(a.type_k, nkv * a.head_dim_k)) &&
                   (a.type_v != GgmlType::Q8_0 || v.bytes() == rows * kv_row_bytes(a.type_v, nkv * a.head_dim_v)),
               "GPU attention: a q8_0 K/V cache must hold exactly its {} rows", rows);
  const uint32_t spec[2] = {kv_type_id(a.type_k), kv_type_id(a.type_v)};
  const Pipeline& p = get("attention", 8, 44, true, spec);
  struct {
    uint32_t n_head, n_kv, dk, dv, n_keys, window, has_sink;
    float scale;
    uint32_t has_base, kv_rows, t0;
  } push{static_cast<uint32_t>(a.n_head), static_cast<uint32_t>(a.n_head_kv), static_cast<uint32_t>(a.head_dim_k), static_cast<uint32_t>(a.head_dim_v),
         static_cast<uint32_t>(a.n_keys), static_cast<uint32_t>(a.window), sinks ? 1u : 0u, a.scale, base ? 1u : 0u, static_cast<uint32_t>(rows), 0};
  const BufRange b[8] = {{&q}, {&k}, {&v}, {&pos}, {sinks ? sinks : &q}, {&out}, {&scratch}, {base ? base : &pos}};
  for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {  // each dispatch is followed by a barrier: the scratch is free again
    push.t0 = static_cast<uint32_t>(t0);
    dev_.dispatch(p, b, &push, static_cast<uint32_t>(a.n_head), static_cast<uint32_t>(std::min(chunk, n_tok - t0)));
  }
}

}  // namespace strata::gpu
