// Registers the scalar reference formats. Each format family lives in its own file.
#include "kernels/scalar/quants_internal.h"

namespace strata {

void register_scalar_quants(std::array<QuantTraits, kGgmlTypeCount>& t) {
  scalar::register_float_quants(t);   // F32, F16, BF16
  scalar::register_legacy_quants(t);  // Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1
  scalar::register_k_quants(t);       // Q2_K..Q6_K, Q8_K
  scalar::register_iq_quants(t);      // IQ4_NL, IQ4_XS
  scalar::register_iq_lattice_quants(t);   // IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S
  scalar::register_iq1_ternary_quants(t);  // IQ1_S, IQ1_M, TQ1_0, TQ2_0
  scalar::register_mxfp4_quants(t);   // MXFP4
}

}  // namespace strata
