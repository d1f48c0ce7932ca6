// Traits table over the scalar reference formats (filled in kernels/scalar/quants_*.cpp).
#include "kernels/quants.h"

#include <array>

#include "core/error.h"

namespace strata {

// Defined in kernels/scalar/: registers every format's reference functions.
void register_scalar_quants(std::array<QuantTraits, kGgmlTypeCount>& t);

namespace {
const std::array<QuantTraits, kGgmlTypeCount>& table() {
  static const std::array<QuantTraits, kGgmlTypeCount> t = [] {
    std::array<QuantTraits, kGgmlTypeCount> a{};
    for (uint32_t i = 0; i < kGgmlTypeCount; ++i) a[i].type = static_cast<GgmlType>(i);
    register_scalar_quants(a);
    return a;
  }();
  return t;
}
}  // namespace

const QuantTraits& quant_traits(GgmlType t) {
  const auto i = static_cast<uint32_t>(t);
  STRATA_CHECK(i < kGgmlTypeCount, "invalid ggml type id {}", i);
  return table()[i];
}

bool has_dequantize(GgmlType t) { return quant_traits(t).to_float != nullptr; }

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  const auto& q = quant_traits(t);
  STRATA_CHECK(q.to_float, "no dequantization for type {}", ggml_type_name(t));
  q.to_float(src, dst, n);
}


void quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
  const auto& q = quant_traits(t);
  STRATA_CHECK(q.from_float, "no quantizer for type {}", ggml_type_name(t));
  q.from_float(src, dst, n);
}

}  // namespace strata
