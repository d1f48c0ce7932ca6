#pragma once
// `strata gpu --check`: each kernel of gpu/ops.h run once on random data on a device and compared
// with the CPU (the product of the dequantized weights in double, and the CPU kernel the engine
// runs), plus the transfer rates. What a machine with a new GPU is asked first.
#include <string>
#include <vector>

#include "gpu/device.h"

namespace strata::gpu {

struct CheckResult {
  std::string op;          // "matvec q4_K 4096x4096", "rmsnorm 4096", ...
  double nmse_exact = 0;   // against the double-precision product of what the shader reads
  double nmse_cpu = 0;     // against the CPU kernel (activations in the weight type's vec_dot_type)
  double threshold = 0;    // the bound of tests/gpu for nmse_cpu
  double gpu_ms = 0;       // one run, after a warm-up run (lavapipe: the CPU's speed, not a GPU's)
  bool ok = false;
};
struct TransferRates {
  double upload_gbs = 0, download_gbs = 0;
  uint64_t bytes = 0;
};

// Normalized mean squared error, as llama.cpp's test-backend-ops: sum (a - ref)^2 / sum ref^2
// (the plain sum when ref is all zero). The bound every GPU kernel is held to (here and in tests/gpu).
double nmse(const std::vector<float>& a, const std::vector<float>& ref);

// rows x cols of each weight type (cols rounded to the type's block).
std::vector<CheckResult> self_check(Device& dev, int64_t rows, int64_t cols, int n_tok);
TransferRates transfer_rates(Device& dev, uint64_t bytes);

}  // namespace strata::gpu
