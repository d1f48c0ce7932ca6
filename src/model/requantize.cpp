#include "model/requantize.h"

#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_names.h"
#include "gguf/gguf_writer.h"
#include "kernels/quants.h"

namespace strata {
namespace {

bool is_routed_expert_weight(std::string_view name) {
  return name.find(tn::kRoutedExpertsMark) != std::string_view::npos && name.ends_with(".weight");
}

// One output tensor's bytes: copied from the input, or its rows requantized to `to`.
struct TensorJob {
  const GgufTensor* src = nullptr;
  GgmlType to = GgmlType::F32;
  ThreadPool* pool = nullptr;
};

void copy_tensor(void* ctx, uint8_t* dst, uint64_t nbytes) {
  const TensorJob& j = *static_cast<const TensorJob*>(ctx);
  std::memcpy(dst, j.src->data, nbytes);
}

void requantize_tensor(void* ctx, uint8_t* dst, uint64_t nbytes) {
  const TensorJob& j = *static_cast<const TensorJob*>(ctx);
  const int64_t cols = static_cast<int64_t>(j.src->ne[0]);
  const int64_t rows = static_cast<int64_t>(j.src->n_elements()) / cols;
  const size_t in_row = j.src->row_bytes(), out_row = ggml_row_size(j.to, static_cast<uint64_t>(cols));
  STRATA_CHECK(out_row * static_cast<uint64_t>(rows) == nbytes, "{}: {} bytes planned for {} rows of {}", j.src->name, nbytes, rows, out_row);
  const auto work = [&](int64_t a, int64_t b, int) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = a; r < b; ++r) {
      dequantize_row(j.src->type, j.src->data + static_cast<size_t>(r) * in_row, row.data(), cols);
      quantize_row(j.to, row.data(), dst + static_cast<size_t>(r) * out_row, cols);
    }
  };
  if (j.pool) j.pool->parallel_for(rows, 16, work);
  else work(0, rows, 0);
}

std::string quantizable_types() {
  std::string s;
  for (uint32_t i = 0; i < kGgmlTypeCount; ++i) {
    const auto info = ggml_type_info(i);
    if (info && can_quantize_to(info->type)) s += (s.empty() ? "" : ", ") + std::string(info->name);
  }
  return s;
}

}  // namespace

bool can_quantize_to(GgmlType t) {
  const QuantTraits& q = quant_traits(t);
  return q.from_float && q.to_float && q.vec_dot;
}

RequantizeReport requantize_experts(const std::string& in, const std::string& out, GgmlType type, ThreadPool* pool) {
  STRATA_CHECK(can_quantize_to(type), "type {}: Strata has no quantizer for it (it can write {})", ggml_type_name(type), quantizable_types());
  std::error_code ec;
  STRATA_CHECK(!std::filesystem::equivalent(in, out, ec), "{}: the output must be another file than the input", out);
  const auto m = GgufModel::open(in);
  const GgufFile& head = *m->parts()[0];
  GgufWriter w(head.alignment);
  for (const auto& [key, value] : m->metadata())
    if (!key.starts_with("split.")) w.set_value(key, value);
  RequantizeReport rep;
  std::vector<TensorJob> jobs(m->tensors().size());
  for (size_t i = 0; i < m->tensors().size(); ++i) {
    const GgufTensor& t = m->tensors()[i];
    std::vector<uint64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    jobs[i] = TensorJob{&t, t.type, pool};
    if (!is_routed_expert_weight(t.name) || t.type == type) {
      if (is_routed_expert_weight(t.name)) ++rep.expert_tensors, rep.expert_bytes_in += t.nbytes, rep.expert_bytes_out += t.nbytes;
      else ++rep.other_tensors;
      w.add_tensor_lazy(t.name, t.type, ne, copy_tensor, &jobs[i]);
      continue;
    }
    STRATA_CHECK(has_dequantize(t.type), "{}: tensor {} is {}, which Strata cannot read", in, t.name, ggml_type_name(t.type));
    const int block = ggml_info(type).block_size;
    STRATA_CHECK(t.ne[0] % static_cast<uint64_t>(block) == 0, "{}: tensor {} has rows of {} values, not whole {} blocks of {}", in, t.name,
                 t.ne[0], ggml_type_name(type), block);
    jobs[i].to = type;
    ++rep.expert_tensors;
    rep.expert_bytes_in += t.nbytes;
    rep.expert_bytes_out += ggml_row_size(type, t.ne[0]) * (t.n_elements() / t.ne[0]);
    w.add_tensor_lazy(t.name, type, ne, requantize_tensor, &jobs[i]);
  }
  STRATA_CHECK(rep.expert_tensors > 0, "{}: no routed expert tensors (names with '{}')", in, tn::kRoutedExpertsMark);
  w.write(out);
  return rep;
}

}  // namespace strata
