// llama_vec_dot_check: Strata's Q8_K-activation dots (i-quants, ternary, Q4_K) against the
// peer's own CPU kernels (libggml-cpu-haswell.so of npm @node-llama-cpp/linux-x64@3.22.1, the
// build that produced the fixtures), loaded with dlopen and called through their exported
// ggml_vec_dot_<type>_q8_K symbols:
//   llama_vec_dot_check [TYPE|all]        bitwise comparison on 1,800 random rows of 1..16 blocks
//                                         per type (golden blocks, extreme rows included, and
//                                         random bytes), every kernel table; prints mismatches
//                                         and the worst relative difference
//   llama_vec_dot_check [TYPE|all] time   L2-hot GB/s of both (32 rows x 4096, thread CPU time,
//                                         best of 15 interleaved runs), and the ratio
// Build: tools/llama_vec_dot_check/build.sh (not part of the CMake build). Needs the peer
// installed by shared/peer/setup.sh (PEER_DIR) and the fixtures (STRATA_FIXTURES).
#include <dlfcn.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <vector>
#include "gguf/ggml_type.h"
#include "kernels/kernel_table.h"
#include "kernels/quants.h"
using namespace strata;
typedef void (*ggml_vd)(int n, float* s, size_t bs, const void* vx, size_t bx, const void* vy, size_t by, int nrc);
static std::vector<uint8_t> rd(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
static uint32_t bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
int main(int argc, char** argv) {
  const char* peer = std::getenv("PEER_DIR");
  const std::string dir = std::string(peer ? peer : "/tmp/strata-peer") + "/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/";
  const char* fx = std::getenv("STRATA_FIXTURES");
  const std::string fixtures = std::string(fx ? fx : "../shared/fixtures") + "/quant-blocks/";
  if (!dlopen((dir + "libggml-base.so").c_str(), RTLD_NOW | RTLD_GLOBAL)) { std::printf("%s\n", dlerror()); return 1; }
  void* base = dlopen((dir + "libggml-base.so").c_str(), RTLD_NOW | RTLD_GLOBAL); (void)base;
  void* h = dlopen((dir + "libggml-cpu-haswell.so").c_str(), RTLD_NOW);
  if (!h) { std::printf("%s\n", dlerror()); return 1; }
  if (auto init = reinterpret_cast<void (*)()>(dlsym(h, "ggml_cpu_init"))) init();
  const bool timing = argc > 2 && std::string(argv[2]) == "time";
  const char* stems[] = {"iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m", "tq1_0", "tq2_0", "q4_k"};
  for (const char* stem : stems) {
    if (argc > 1 && std::string(argv[1]) != "all" && std::string(argv[1]) != stem) continue;
    const GgmlType t = *ggml_type_from_name(stem);
    std::string fn = std::string("ggml_vec_dot_") + stem + "_q8_K";
    if (std::string(stem) == "q4_k") fn = "ggml_vec_dot_q4_K_q8_K";
    auto g = reinterpret_cast<ggml_vd>(dlsym(h, fn.c_str()));
    if (!g) { std::printf("no %s\n", fn.c_str()); continue; }
    const auto blocks = rd(fixtures + stem + ".blocks");
    const int64_t tsz = ggml_info(t).type_size, nb_g = static_cast<int64_t>(blocks.size()) / tsz;
    if (nb_g == 0) { std::printf("no fixture blocks for %s under %s\n", stem, fixtures.c_str()); return 1; }
    const KernelTable* tabs[] = {kernel_table(Isa::Scalar), kernel_table(Isa::Avx2), kernel_table(Isa::Avx512), kernel_table(Isa::AvxVnni)};
    std::mt19937 rng(5);
    if (!timing) {
      int mism[4] = {}, total = 0; double worst[4] = {};
      for (int nblk : {1, 2, 3, 5, 8, 16}) for (int rep = 0; rep < 300; ++rep) {
        const int64_t n = 256 * nblk;
        std::vector<uint8_t> w(nblk * tsz);
        for (int b = 0; b < nblk; ++b) {
          int64_t src;
          do src = rng() % nb_g; while (rep % 2 == 0 && (src == 5 || src == 21 || src == 18));
          std::memcpy(w.data() + b * tsz, blocks.data() + src * tsz, tsz);
        }
        if (rep % 3 == 2) for (auto& c : w) c = (rng() & 0x2F) | 0x10;  // bench-style bytes
        std::vector<float> x(n);
        std::normal_distribution<float> nd(0, 1);
        const float sc = std::pow(10.0f, float(int(rng() % 5)) - 2);
        for (auto& v : x) v = sc * nd(rng) * (rng() % 17 == 0 ? 8.f : 1.f);
        std::vector<uint8_t> a(ggml_row_size(GgmlType::Q8_K, n));
        tabs[1]->quantize_act[uint32_t(GgmlType::Q8_K)](x.data(), a.data(), n);
        float ref; g(int(n), &ref, 0, w.data(), 0, a.data(), 0, 1);
        ++total;
        for (int k = 0; k < 4; ++k) {
          if (!tabs[k]) continue;
          const float got = tabs[k]->vec_dot[uint32_t(t)](n, w.data(), a.data());
          if (bits(got) != bits(ref) && !(std::isnan(got) && std::isnan(ref))) {
            ++mism[k];
            if (std::isfinite(ref) && ref != 0) worst[k] = std::max(worst[k], std::fabs(double(got) - ref) / std::fabs(ref));
          }
        }
      }
      std::printf("%-8s rows %d  mismatches scalar %d (%.1e) avx2 %d (%.1e) avx512 %d (%.1e) vnni %d (%.1e)\n", stem, total,
                  mism[0], worst[0], mism[1], worst[1], mism[2], worst[2], mism[3], worst[3]);
    } else {
      const int64_t cols = 4096, rows = 32;
      const size_t rb = ggml_row_size(t, cols);
      std::vector<uint8_t> w(rows * rb);
      for (auto& c : w) c = (rng() & 0x2F) | 0x10;
      std::vector<float> x(cols, 0.25f);
      std::vector<uint8_t> a(ggml_row_size(GgmlType::Q8_K, cols));
      tabs[1]->quantize_act[uint32_t(GgmlType::Q8_K)](x.data(), a.data(), cols);
      auto cpu = [] { timespec ts; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); return ts.tv_sec + 1e-9 * ts.tv_nsec; };
      auto once = [&](auto f) {
        volatile float sink = 0;
        const double t0 = cpu();
        for (int it = 0; it < 40; ++it) for (int64_t row = 0; row < rows; ++row) sink = sink + f(w.data() + row * rb);
        return cpu() - t0;
      };
      double best[5] = {1e9, 1e9, 1e9, 1e9, 1e9};
      for (int r = 0; r < 15; ++r) {
        best[4] = std::min(best[4], once([&](const uint8_t* p) { float s; g(int(cols), &s, 0, p, 0, a.data(), 0, 1); return s; }));
        for (int k = 0; k < 4; ++k) if (tabs[k] && (k > 0 || r < 2)) best[k] = std::min(best[k], once([&](const uint8_t* p) { return tabs[k]->vec_dot[uint32_t(t)](cols, p, a.data()); }));
      }
      const double gl = 40.0 * rows * rb / best[4] / 1e9;
      double gb[4] = {};
      for (int k = 0; k < 4; ++k) gb[k] = 40.0 * rows * rb / best[k] / 1e9;
      std::printf("%-8s L2-hot GB/s  llama.cpp %.2f | scalar %.2f avx2 %.2f avx512 %.2f vnni %.2f | avx2/llama %.2f\n", stem, gl, gb[0], gb[1], gb[2], gb[3], gb[1] / gl);
    }
  }
}
