// Registers the scalar reference formats. Each format family lives in its own file.
#include <array>

#include "kernels/quants.h"

namespace strata {

void register_scalar_quants(std::array<QuantTraits, kGgmlTypeCount>& t) {
  (void)t;  // formats are registered here as they are implemented
}

}  // namespace strata
