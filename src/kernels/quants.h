#pragma once
// Scalar reference for every supported weight format: dequantization (bit-exact with ggml),
// quantizers from f32 (for activations and for writing test models), and the reference dot
// product of a weight row with an activation row in the format's `vec_dot_type`.
// Dispatch goes through one traits table indexed by GgmlType, never through repeated switches.
#include <cstdint>

#include "gguf/ggml_type.h"

namespace strata {

using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);    // n values (multiple of block)
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);  // n values (multiple of block)
// Dot product of n values: weight row `w` (the weight type) with activation row `a` (vec_dot_type).
using VecDotFn = float (*)(int64_t n, const void* w, const void* a);

struct QuantTraits {
  GgmlType type;
  ToFloatFn to_float = nullptr;       // scalar reference dequantization (nullptr: unsupported type)
  FromFloatFn from_float = nullptr;   // reference quantizer (nullptr: not provided)
  GgmlType vec_dot_type = GgmlType::F32;  // activation format the dot product consumes
  VecDotFn vec_dot = nullptr;         // scalar reference dot product
};

// Traits of a type; to_float == nullptr for types without support yet (IQ2/IQ3/IQ1/TQ...).
const QuantTraits& quant_traits(GgmlType t);
bool has_dequantize(GgmlType t);

// Convenience wrappers (checked: throw strata::Error on unsupported types).
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);

}  // namespace strata
