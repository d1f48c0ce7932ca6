#pragma once
// K-quant super-blocks (256 values) unpacked to small integers and back. The bit layouts
// live only here; dequantization, dot products and quantizers work on KUnpacked.
//
// Every K-quant dequantizes value v of sub-block s = v / sub_size as
//   y[v] = (d * sc[s]) * q[v] - (dmin * mn[s])
// with mn == 0 and dmin == 0 for the symmetric formats (Q3_K, Q6_K).
#include "kernels/scalar/quants_internal.h"

namespace strata::scalar {

struct KUnpacked {
  int8_t q[QK_K];  // quant per value (Q2/Q4/Q5: unsigned levels; Q3/Q6: signed, centred)
  int sc[16];      // integer sub-block scale  [n_sub]
  int mn[16];      // integer sub-block min    [n_sub] (0 for Q3_K/Q6_K)
  uint16_t d = 0;     // f16 super-block scale
  uint16_t dmin = 0;  // f16 super-block min scale (0 for Q3_K/Q6_K)
};

struct KFormat {
  int sub_size;      // values per sub-block (16 or 32)
  int q_min, q_max;  // range of q
  int sc_min, sc_max;  // range of sc
  int mn_max;        // range of mn is [0, mn_max]; 0: symmetric format
};
inline constexpr KFormat kQ2K{16, 0, 3, 0, 15, 15};
inline constexpr KFormat kQ3K{16, -4, 3, -32, 31, 0};
inline constexpr KFormat kQ4K{32, 0, 15, 0, 63, 63};
inline constexpr KFormat kQ5K{32, 0, 31, 0, 63, 63};
inline constexpr KFormat kQ6K{16, -32, 31, -128, 127, 0};

void unpack_q2_K(const block_q2_K& b, KUnpacked& u);
void unpack_q3_K(const block_q3_K& b, KUnpacked& u);
void unpack_q4_K(const block_q4_K& b, KUnpacked& u);
void unpack_q5_K(const block_q5_K& b, KUnpacked& u);
void unpack_q6_K(const block_q6_K& b, KUnpacked& u);

void pack_q2_K(const KUnpacked& u, block_q2_K& b);
void pack_q3_K(const KUnpacked& u, block_q3_K& b);
void pack_q4_K(const KUnpacked& u, block_q4_K& b);
void pack_q5_K(const KUnpacked& u, block_q5_K& b);
void pack_q6_K(const KUnpacked& u, block_q6_K& b);

// Quantizes 256 values into u for format f (defined in quants_k_quantize.cpp).
void quantize_k_superblock(const KFormat& f, const float* x, KUnpacked& u);

}  // namespace strata::scalar
