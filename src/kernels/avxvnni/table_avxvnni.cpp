// AVX-VNNI kernel table: the AVX2 table with the formats MoE models are made of replaced by
// 256-bit VNNI kernels, VEX-encoded where the CPU has AVX-VNNI, else EVEX-encoded where it has
// AVX-512 VL + VNNI (the same kernels, useful where 512-bit work lowers the clock). Compiled at
// the baseline: it only picks functions.
#include "core/cpu_features.h"
#include "kernels/avxvnni/kernels_avxvnni.h"
#include "kernels/kernel_table.h"

namespace strata {

void fill_avxvnni_table(KernelTable& t) {
  t.isa = Isa::AvxVnni;
  t.name = "avxvnni";
  if (cpu_features().avxvnni) avxvnni::fill_kernels(t);
  else avxvnni_evex::fill_kernels(t);
}

}  // namespace strata
