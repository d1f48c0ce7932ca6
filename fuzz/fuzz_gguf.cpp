// libFuzzer target for the GGUF reader: GgufFile::parse on arbitrary bytes must either return a
// file whose every view lies inside the input, or throw strata::Error. Nothing else: no crash,
// no other exception, no unbounded memory or time. The first row of each weight tensor is then
// decoded (dequantized and dotted) by every kernel table this CPU has: whatever its bits (NaN or
// Inf scales, any grid index), a block of every supported type gives a defined result.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include <vector>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "kernels/kernel_table.h"
#include "kernels/quants.h"
#include "model/model_summary.h"

namespace {

volatile uint64_t g_sink = 0;  // keeps the walks from being optimized away

void touch(const void* p, uint64_t n) {
  if (n == 0) return;
  const auto* b = static_cast<const uint8_t*>(p);
  g_sink += b[0] + b[n - 1];  // ASan flags either end outside the input
}

void walk_value(const strata::GgufValue& v) {
  g_sink += v.to_string().size();
  if (v.type == strata::GgufType::STRING) touch(v.str.data(), v.str.size());
  if (!v.is_array()) return;
  for (const auto& item : v.items) walk_value(item);
  for (uint64_t k = 0; k < v.count && k < 64; ++k) {
    try {
      if (v.elem_type == strata::GgufType::STRING) g_sink += v.array_string(k).size();
      else if (v.elem_type != strata::GgufType::ARRAY) g_sink += v.array_float(k) > 0 ? 1 : 0;
    } catch (const strata::Error&) {
    }
  }
  if (v.raw && v.count) touch(v.raw, v.count * strata::gguf_scalar_size(v.elem_type));
}

// The same walk ModelSummary::of makes (dense vs routed bytes per layer), over one file.
void walk_tensors(const strata::GgufFile& f) {
  uint64_t dense = 0, routed = 0;
  std::map<int, uint64_t> per_layer;
  for (const auto& t : f.tensors) {
    touch(t.name.data(), t.name.size());
    touch(t.data, t.nbytes);
    g_sink += t.shape_string().size() + t.n_elements() + t.row_bytes();
    g_sink += std::string(strata::ggml_type_name(t.type)).size();
    const int layer = strata::tensor_layer(t.name);
    if (strata::is_routed_expert_tensor(t.name)) {
      routed += t.nbytes;
      if (layer >= 0) per_layer[layer] += t.nbytes / t.ne[t.n_dims - 1];
    } else {
      dense += t.nbytes;
    }
  }
  g_sink += dense + routed + per_layer.size();
}

// Row 0 of up to 16 tensors, n <= 8192 values, through each table's dequantize and vec_dot.
void decode_rows(const strata::GgufFile& f) {
  int done = 0;
  for (const auto& t : f.tensors) {
    if (done >= 16) break;
    const int64_t n = static_cast<int64_t>(t.ne[0]);
    if (!strata::has_dequantize(t.type) || n <= 0 || n > 8192 || n % strata::ggml_info(t.type).block_size != 0) continue;
    if (t.row_bytes() > t.nbytes) continue;
    ++done;
    const auto& tr = strata::quant_traits(t.type);
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>((i * 37) % 17 - 8) * 0.25f;
    if (n % strata::ggml_info(tr.vec_dot_type).block_size != 0) continue;
    std::vector<uint8_t> act(strata::ggml_row_size(tr.vec_dot_type, static_cast<uint64_t>(n)));
    strata::quantize_row(tr.vec_dot_type, x.data(), act.data(), n);
    for (int isa = 0; isa < strata::kIsaCount; ++isa) {
      const strata::KernelTable* k = strata::kernel_table(static_cast<strata::Isa>(isa));
      if (!k) continue;
      const auto ti = static_cast<uint32_t>(t.type);
      if (k->dequantize[ti]) {
        k->dequantize[ti](t.data, y.data(), n);
        g_sink += y[0] != y[0] ? 1 : 0;
      }
      if (k->vec_dot[ti]) g_sink += k->vec_dot[ti](n, t.data, act.data()) > 0 ? 1 : 0;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = strata::GgufFile::parse(data, size, "fuzz-input.gguf");
    for (const auto& [k, v] : f->kv) {
      touch(k.data(), k.size());
      walk_value(v);
    }
    walk_tensors(*f);
    decode_rows(*f);
    g_sink += f->key_offset("general.architecture");
  } catch (const strata::Error&) {
  }
  return 0;
}
