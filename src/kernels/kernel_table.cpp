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
    case Isa::Neon: return "neon";
    case Isa::NeonDotprod: return "neon-dotprod";
  }
  return "?";
}

namespace {

// Each table's needs, as (name, present) pairs; AvxVnni needs the AVX2 set plus either VNNI encoding.
struct Need {
  const char* name;
  bool have;
};

void add_avx2_needs(const CpuFeatures& f, std::string& out) {
  const Need needs[] = {{"avx", f.avx}, {"avx2", f.avx2}, {"fma", f.fma}, {"f16c", f.f16c}, {"bmi2", f.bmi2},
                        {"os-avx-state", f.os_avx}};
  for (const Need& n : needs)
    if (!n.have) out += std::string(out.empty() ? "" : " ") + n.name;
}

void add_avx512_needs(const CpuFeatures& f, std::string& out) {
  const Need needs[] = {{"avx512f", f.avx512f},   {"avx512bw", f.avx512bw},     {"avx512vl", f.avx512vl},
                        {"avx512dq", f.avx512dq}, {"avx512vnni", f.avx512vnni}, {"os-avx512-state", f.os_avx512}};
  for (const Need& n : needs)
    if (!n.have) out += std::string(out.empty() ? "" : " ") + n.name;
}

void add_neon_needs(const CpuFeatures& f, Isa isa, std::string& out) {
  const Need needs[] = {{"asimd", f.asimd}, {"dotprod", isa == Isa::NeonDotprod ? f.dotprod : true}};
  for (const Need& n : needs)
    if (!n.have) out += std::string(out.empty() ? "" : " ") + n.name;
}

std::string missing_for(const CpuFeatures& f, Isa isa) {
  std::string out;
  if (isa == Isa::Scalar) return out;
  if (isa == Isa::Neon || isa == Isa::NeonDotprod) {
    add_neon_needs(f, isa, out);
    return out;
  }
  add_avx2_needs(f, out);
  if (isa == Isa::Avx512) add_avx512_needs(f, out);
  if (isa == Isa::AvxVnni && !f.avxvnni) {
    std::string evex;
    add_avx512_needs(f, evex);
    if (!evex.empty()) out += std::string(out.empty() ? "" : " ") + "avxvnni";
  }
  return out;
}

// The tables this build compiles: the scalar one and its own architecture's.
bool isa_compiled(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: case Isa::Avx512: case Isa::AvxVnni:
#if defined(__x86_64__)
      return true;
#else
      return false;
#endif
    case Isa::Neon: case Isa::NeonDotprod:
#if defined(__aarch64__)
      return true;
#else
      return false;
#endif
  }
  return false;
}

bool isa_supported(Isa isa) { return isa_compiled(isa) && missing_for(cpu_features(), isa).empty(); }

struct Tables {
  std::array<KernelTable, kIsaCount> t;
  Tables() {
    fill_scalar_table(t[0]);
    // Every other table starts as a copy of its parent (AVX2's is scalar, the VNNI ones' is
    // AVX2) and overrides what it specializes.
    // NEON's is scalar, NEON dotprod's NEON.
    constexpr int parent[kIsaCount] = {0, 0, 1, 1, 0, 4};
#if defined(__x86_64__)
    void (*const fill[kIsaCount])(KernelTable&) = {nullptr, fill_avx2_table, fill_avx512_table, fill_avxvnni_table,
                                                   nullptr, nullptr};
#elif defined(__aarch64__)
    void (*const fill[kIsaCount])(KernelTable&) = {nullptr, nullptr, nullptr, nullptr,
                                                   fill_neon_table, fill_neon_dotprod_table};
#else
    void (*const fill[kIsaCount])(KernelTable&) = {};
#endif
    for (int h = 1; h < kIsaCount; ++h) {
      if (!fill[h]) continue;  // not this architecture's
      // A table the CPU lacks stays empty: its fill function and everything it copies are
      // compiled for that ISA, so not one of its instructions may run before the check says yes.
      if (!isa_supported(static_cast<Isa>(h))) continue;
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
std::atomic<bool> g_forced{false};

// Auto-selection order: the first supported wins.
constexpr Isa kPreference[] = {Isa::Avx512, Isa::AvxVnni, Isa::Avx2, Isa::NeonDotprod, Isa::Neon, Isa::Scalar};

}  // namespace

const KernelTable* kernel_table(Isa isa) {
  if (!isa_supported(isa)) return nullptr;
  return &tables().t[static_cast<int>(isa)];
}

std::string isa_missing(Isa isa) { return missing_for(cpu_features(), isa); }
std::string isa_missing(const CpuFeatures& f, Isa isa) { return missing_for(f, isa); }

const KernelTable& kernels() {
  const KernelTable* k = g_selected.load(std::memory_order_acquire);
  if (k) return *k;
  for (Isa isa : kPreference) {
    if (const KernelTable* t = kernel_table(isa)) {
      g_selected.store(t, std::memory_order_release);
      return *t;
    }
  }
  fail("no kernel table available");
}

std::string kernel_choice() {
  const KernelTable& k = kernels();
  if (g_forced.load(std::memory_order_acquire)) return fmt::format("{} (forced: --isa)", k.name);
  // Why not each better table: its first missing feature.
  std::string why;
  for (Isa isa : kPreference) {
    if (isa == k.isa) break;
    if (!isa_compiled(isa)) continue;  // another architecture's
    const std::string miss = isa_missing(isa);
    const std::string first = "no " + miss.substr(0, miss.find(' '));
    if (why.find(first) == std::string::npos) why += (why.empty() ? "" : ", ") + first;
  }
  return fmt::format("{} (auto: {})", k.name, why.empty() ? "best available" : why);
}

void select_isa(Isa isa) {
  STRATA_CHECK(isa_compiled(isa), "--isa {}: not a table of this build's architecture", isa_name(isa));
  const std::string miss = isa_missing(isa);
  STRATA_CHECK(miss.empty(), "--isa {}: this CPU lacks {} (it has: {})", isa_name(isa), miss, cpu_features().describe());
  g_selected.store(&tables().t[static_cast<int>(isa)], std::memory_order_release);
  g_forced.store(true, std::memory_order_release);
}

Isa parse_isa(const char* name) {
  if (!std::strcmp(name, "scalar")) return Isa::Scalar;
  if (!std::strcmp(name, "avx2")) return Isa::Avx2;
  if (!std::strcmp(name, "avx512")) return Isa::Avx512;
  if (!std::strcmp(name, "avxvnni")) return Isa::AvxVnni;
  if (!std::strcmp(name, "neon")) return Isa::Neon;
  if (!std::strcmp(name, "neon-dotprod")) return Isa::NeonDotprod;
  if (!std::strcmp(name, "auto")) return kernels().isa;
  fail("unknown ISA '{}' (expected scalar, avx2, avxvnni, avx512, neon, neon-dotprod or auto)", name);
}

}  // namespace strata
