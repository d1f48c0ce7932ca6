// Which kernel table a CPU gets, and that no table it lacks is ever filled or selectable.
// `make test` runs this file natively and under qemu-user as a Haswell (AVX2, no AVX-512), as a
// Westmere (no AVX), and cross-built for ARM64 as a Cortex-A53 (no dotprod) and a CPU with dotprod, with STRATA_EXPECT_ISA naming the table auto-detection must pick there
// (scripts/test-emulated.sh).
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>

#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/kernel_table.h"

namespace strata {
namespace {

CpuFeatures westmere() { return {}; }  // SSE4.2 at most: nothing a table needs

CpuFeatures haswell() {
  CpuFeatures f;
  f.avx = f.avx2 = f.fma = f.f16c = f.bmi2 = f.os_avx = true;
  return f;
}

CpuFeatures alder_lake() {  // AVX-VNNI (VEX), no AVX-512
  CpuFeatures f = haswell();
  f.avxvnni = true;
  return f;
}

CpuFeatures cortex_a53() {  // ARMv8.0-A: NEON, no dotprod
  CpuFeatures f;
  f.asimd = true;
  return f;
}

CpuFeatures neoverse_n2() {  // ARMv9: dotprod and i8mm
  CpuFeatures f = cortex_a53();
  f.dotprod = f.i8mm = true;
  return f;
}

// The tables of the architecture this test is built for (the others are never compiled in).
bool this_arch(Isa isa) {
#if defined(__aarch64__)
  return isa == Isa::Scalar || isa == Isa::Neon || isa == Isa::NeonDotprod;
#else
  return isa == Isa::Scalar || isa == Isa::Avx2 || isa == Isa::Avx512 || isa == Isa::AvxVnni;
#endif
}

CpuFeatures ice_lake_server() {
  CpuFeatures f = haswell();
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512vnni = f.os_avx512 = true;
  return f;
}

TEST(IsaDispatch, EachTableNamesWhatACpuLacks) {
  EXPECT_EQ(isa_missing(westmere(), Isa::Scalar), "");
  EXPECT_EQ(isa_missing(westmere(), Isa::Avx2), "avx avx2 fma f16c bmi2 os-avx-state");

  EXPECT_EQ(isa_missing(haswell(), Isa::Avx2), "");
  EXPECT_EQ(isa_missing(haswell(), Isa::Avx512), "avx512f avx512bw avx512vl avx512dq avx512vnni os-avx512-state");
  EXPECT_EQ(isa_missing(haswell(), Isa::AvxVnni), "avxvnni");

  EXPECT_EQ(isa_missing(alder_lake(), Isa::AvxVnni), "");
  EXPECT_EQ(isa_missing(alder_lake(), Isa::Avx512), "avx512f avx512bw avx512vl avx512dq avx512vnni os-avx512-state");

  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::AvxVnni}) EXPECT_EQ(isa_missing(ice_lake_server(), isa), "") << isa_name(isa);

  // The CPU has the instructions but the OS does not save the registers: not usable.
  CpuFeatures no_os = ice_lake_server();
  no_os.os_avx512 = false;
  EXPECT_EQ(isa_missing(no_os, Isa::Avx512), "os-avx512-state");
  EXPECT_EQ(isa_missing(no_os, Isa::AvxVnni), "avxvnni");
  no_os.os_avx = false;
  EXPECT_EQ(isa_missing(no_os, Isa::Avx2), "os-avx-state");
  // The AVX2 kernels are compiled with -mbmi2 too.
  CpuFeatures no_bmi2 = haswell();
  no_bmi2.bmi2 = false;
  EXPECT_EQ(isa_missing(no_bmi2, Isa::Avx2), "bmi2");
  EXPECT_EQ(isa_missing(westmere(), Isa::Neon), "asimd");
  EXPECT_EQ(isa_missing(westmere(), Isa::NeonDotprod), "asimd dotprod");
  EXPECT_EQ(isa_missing(cortex_a53(), Isa::Neon), "");
  EXPECT_EQ(isa_missing(cortex_a53(), Isa::NeonDotprod), "dotprod");
  EXPECT_EQ(isa_missing(neoverse_n2(), Isa::NeonDotprod), "");
  EXPECT_EQ(isa_missing(neoverse_n2(), Isa::Avx2), "avx avx2 fma f16c bmi2 os-avx-state");
}

// The table this CPU has is filled and selectable; a table it lacks is neither (its fill function
// is compiled for that ISA and must never run), and forcing it names the missing feature.
TEST(IsaDispatch, OnlyTheTablesThisCpuHasExist) {
  for (Isa isa : kAllIsas) {
    const std::string miss = isa_missing(isa);
    const KernelTable* t = kernel_table(isa);
    if (!this_arch(isa)) {  // another architecture's table: never there, never selectable
      EXPECT_EQ(t, nullptr) << isa_name(isa);
      EXPECT_THROW(select_isa(isa), Error) << isa_name(isa);
    } else if (miss.empty()) {
      ASSERT_NE(t, nullptr) << isa_name(isa);
      EXPECT_EQ(t->isa, isa);
      EXPECT_STREQ(t->name, isa_name(isa));
      EXPECT_NE(t->vec_dot[static_cast<uint32_t>(GgmlType::Q8_0)], nullptr) << isa_name(isa);
    } else {
      EXPECT_EQ(t, nullptr) << isa_name(isa) << " lacks " << miss;
      try {
        select_isa(isa);
        ADD_FAILURE() << "--isa " << isa_name(isa) << " was accepted on a CPU that lacks " << miss;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("lacks " + miss.substr(0, miss.find(' '))), std::string::npos) << e.what();
      }
    }
  }
}

// Auto-detection picks the best table the CPU has: AVX-512, then AVX-VNNI, then AVX2, then scalar
// (ARM64: NEON dotprod, then NEON, then scalar).
// Under emulation STRATA_EXPECT_ISA says which one that CPU must get.
TEST(IsaDispatch, AutoPicksTheBestTableThisCpuHas) {
  Isa best = Isa::Scalar;
#if defined(__aarch64__)
  const Isa order[] = {Isa::Neon, Isa::NeonDotprod}, top = Isa::NeonDotprod;
#else
  const Isa order[] = {Isa::Avx2, Isa::AvxVnni, Isa::Avx512}, top = Isa::Avx512;
#endif
  for (Isa isa : order)
    if (isa_missing(isa).empty()) best = isa;
  const KernelTable& k = kernels();
  EXPECT_EQ(k.isa, best) << cpu_features().describe();
  const std::string choice = kernel_choice();
  EXPECT_EQ(choice.rfind(std::string(k.name) + " (auto: ", 0), 0u) << choice;
  if (best != top) {
    EXPECT_NE(choice.find("no "), std::string::npos) << choice << ": the reason names what is missing";
  }
  if (const char* want = std::getenv("STRATA_EXPECT_ISA")) {
    EXPECT_STREQ(k.name, want) << "auto-detection on this (emulated) CPU: " << choice << "; cpu: " << cpu_features().describe();
  }
  // ... and STRATA_EXPECT_FEATURES the features that CPU has (the emulated CPU is the one meant).
  if (const char* feats = std::getenv("STRATA_EXPECT_FEATURES")) {
    const std::string have = " " + cpu_features().describe() + " ";
    std::istringstream in(feats);
    for (std::string f; in >> f;) EXPECT_NE(have.find(" " + f + " "), std::string::npos) << f << " not in: " << have;
  }
}

}  // namespace
}  // namespace strata
