#pragma once
// Random-block generators for the types whose bits are valid at random (i-quants, ternary, Q2_K,
// Q3_K, the 32-value fallbacks): random bits, then a calibrated super-block scale.
#include <cstdint>

#include "gguf/ggml_type.h"
#include "synth/synth_blocks.h"

namespace strata {

bool synth_layout_supported(GgmlType t);
// Calibrates t's scale once; call before filling from several threads.
void synth_layout_prepare(GgmlType t);
// n_blocks random blocks whose dequantized values have mean ~0 and std ~sigma.
void synth_layout_fill(GgmlType t, uint8_t* dst, uint64_t n_blocks, float sigma, SynthRng& r);

}  // namespace strata
