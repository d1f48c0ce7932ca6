#pragma once
// What the CPU and the OS support, probed once: x86-64 with cpuid + xgetbv, ARM64 with
// getauxval(AT_HWCAP / AT_HWCAP2) (the kernel's view, which includes what it lets user space run).
#include <string>

namespace strata {

struct CpuFeatures {
  bool avx = false, avx2 = false, fma = false, f16c = false, bmi2 = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512vnni = false;
  bool avx512bf16 = false, avxvnni = false, amx_int8 = false;
  bool os_avx = false, os_avx512 = false;  // XCR0 says the OS saves the registers
  // ARM64: Advanced SIMD (NEON, every ARMv8-A CPU), SDOT/UDOT (ARMv8.2 dotprod), SMMLA/USDOT (ARMv8.6 i8mm).
  bool asimd = false, dotprod = false, i8mm = false;

  bool has_avx2_set() const { return avx && avx2 && fma && f16c && bmi2 && os_avx; }
  bool has_avx512_set() const {
    return avx512f && avx512bw && avx512vl && avx512dq && avx512vnni && os_avx512 && has_avx2_set();
  }
  std::string describe() const;
};

// Probed once, then cached.
const CpuFeatures& cpu_features();

}  // namespace strata
