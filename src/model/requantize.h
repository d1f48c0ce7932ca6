#pragma once
// strata quantize --experts-only (issue 37): a copy of a GGUF file whose routed expert tensors
// (names with "_exps.", tn::kRoutedExpertsMark; their biases excepted) are requantized to another
// weight type: a low-bit stand-in of the same architecture and expert shapes, or a smaller file.
// Every other tensor and every metadata entry is copied as it is (split.* keys dropped: the output
// is one file). Each expert row is dequantized to f32 and quantized with the kernels' reference
// quantizer (round to nearest; no importance matrix); a tensor already of the type is copied.
#include <cstdint>
#include <string>

#include "gguf/ggml_type.h"

namespace strata {

class ThreadPool;

struct RequantizeReport {
  int expert_tensors = 0, other_tensors = 0;
  uint64_t expert_bytes_in = 0, expert_bytes_out = 0;
};

// Weight types Strata can write: a reference quantizer and a dot product for the weights.
bool can_quantize_to(GgmlType t);

// Throws strata::Error naming the file, tensor or type: a type without a quantizer, an expert
// tensor whose type cannot be read or whose rows are not whole blocks of `type`, a file without
// routed experts, out == in. pool: splits each tensor's rows (nullptr: one thread).
RequantizeReport requantize_experts(const std::string& in, const std::string& out, GgmlType type, ThreadPool* pool);

}  // namespace strata
