#include "core/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#endif

#include <cstdint>

namespace strata {

#if defined(__x86_64__) || defined(__i386__)
static CpuFeatures probe() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  const unsigned max_leaf = a;
  __cpuid(1, a, b, c, d);
  f.fma = c & (1u << 12);
  f.avx = c & (1u << 28);
  f.f16c = c & (1u << 29);
  const bool osxsave = c & (1u << 27);
  if (osxsave) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    const uint64_t xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
    f.os_avx = (xcr0 & 0x6) == 0x6;
    f.os_avx512 = (xcr0 & 0xE6) == 0xE6;
  }
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = b & (1u << 5);
    f.bmi2 = b & (1u << 8);
    f.avx512f = b & (1u << 16);
    f.avx512dq = b & (1u << 17);
    f.avx512bw = b & (1u << 30);
    f.avx512vl = b & (1u << 31);
    f.avx512vnni = c & (1u << 11);
    f.amx_int8 = d & (1u << 25);
    __cpuid_count(7, 1, a, b, c, d);
    f.avxvnni = a & (1u << 4);
    f.avx512bf16 = a & (1u << 5);
  }
  return f;
}
#elif defined(__aarch64__)
static CpuFeatures probe() {
  // Bits of the Linux arm64 ABI (asm/hwcap.h), spelled out so that older headers build.
  constexpr unsigned long kHwcapAsimd = 1ul << 1, kHwcapAsimdDp = 1ul << 20;
  constexpr unsigned long kHwcap2I8mm = 1ul << 13;
  const unsigned long hw = ::getauxval(AT_HWCAP), hw2 = ::getauxval(AT_HWCAP2);
  CpuFeatures f;
  f.asimd = hw & kHwcapAsimd;
  f.dotprod = f.asimd && (hw & kHwcapAsimdDp);
  f.i8mm = f.asimd && (hw2 & kHwcap2I8mm);
  return f;
}
#else
static CpuFeatures probe() { return {}; }
#endif

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = probe();
  return f;
}

std::string CpuFeatures::describe() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx, "avx");
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(bmi2, "bmi2");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512vnni, "avx512vnni");
  add(avx512bf16, "avx512bf16");
  add(avxvnni, "avxvnni");
  add(amx_int8, "amx-int8");
  add(asimd, "asimd");
  add(dotprod, "dotprod");
  add(i8mm, "i8mm");
#if defined(__aarch64__)
  if (s.empty()) s = "(no asimd)";
#else
  if (s.empty()) s = "(baseline x86-64)";
#endif
  return s;
}

}  // namespace strata
