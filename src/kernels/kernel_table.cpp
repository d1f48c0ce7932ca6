#include "kernels/kernel_table.h"

#include <array>
#include <atomic>
#include <cstring>

#include "core/cpu_features.h"
#include "core/error.h"

namespace strata {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::AvxVnni: return "avxvnni";
  }
  return "?";
}

namespace {

bool isa_supported(Isa isa) {
  const auto& f = cpu_features();
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return f.has_avx2_set();
    case Isa::Avx512: return f.has_avx512_set();
    case Isa::AvxVnni: return f.has_avx2_set() && (f.avxvnni || f.has_avx512_set());
  }
  return false;
}

struct Tables {
  std::array<KernelTable, kIsaCount> t;
  Tables() {
    fill_scalar_table(t[0]);
    // Every other table starts as a copy of its parent (AVX2's is scalar, the VNNI ones' is
    // AVX2) and overrides what it specializes.
    constexpr int parent[kIsaCount] = {0, 0, 1, 1};
    void (*const fill[kIsaCount])(KernelTable&) = {nullptr, fill_avx2_table, fill_avx512_table, fill_avxvnni_table};
    for (int h : {1, 2, 3}) {
      t[h] = t[parent[h]];
      fill[h](t[h]);
      // A multi-token kernel mirrors one single-token kernel bit for bit: where a table
      // replaced vec_dot but kept the inherited vec_dot_xn, drop it (matmul loops vec_dot).
      for (uint32_t i = 0; i < kGgmlTypeCount; ++i) {
        if (t[h].vec_dot[i] != t[parent[h]].vec_dot[i] && t[h].vec_dot_xn[i] == t[parent[h]].vec_dot_xn[i])
          t[h].vec_dot_xn[i] = nullptr;
        // Likewise a tile mirrors one multi-token kernel.
        if (t[h].vec_dot_xn[i] != t[parent[h]].vec_dot_xn[i] && t[h].vec_dot_tile[i] == t[parent[h]].vec_dot_tile[i])
          t[h].vec_dot_tile[i] = nullptr;
      }
    }
  }
};

const Tables& tables() {
  static const Tables tb;
  return tb;
}

std::atomic<const KernelTable*> g_selected{nullptr};

}  // namespace

const KernelTable* kernel_table(Isa isa) {
  if (!isa_supported(isa)) return nullptr;
  return &tables().t[static_cast<int>(isa)];
}

const KernelTable& kernels() {
  const KernelTable* k = g_selected.load(std::memory_order_acquire);
  if (k) return *k;
  for (Isa isa : {Isa::Avx512, Isa::AvxVnni, Isa::Avx2, Isa::Scalar}) {
    if (const KernelTable* t = kernel_table(isa)) {
      g_selected.store(t, std::memory_order_release);
      return *t;
    }
  }
  fail("no kernel table available");
}

void select_isa(Isa isa) {
  const KernelTable* t = kernel_table(isa);
  STRATA_CHECK(t != nullptr, "ISA '{}' is not supported by this CPU ({})", isa_name(isa), cpu_features().describe());
  g_selected.store(t, std::memory_order_release);
}

Isa parse_isa(const char* name) {
  if (!std::strcmp(name, "scalar")) return Isa::Scalar;
  if (!std::strcmp(name, "avx2")) return Isa::Avx2;
  if (!std::strcmp(name, "avx512")) return Isa::Avx512;
  if (!std::strcmp(name, "avxvnni")) return Isa::AvxVnni;
  if (!std::strcmp(name, "auto")) return kernels().isa;
  fail("unknown ISA '{}' (expected scalar, avx2, avxvnni, avx512 or auto)", name);
}

}  // namespace strata
