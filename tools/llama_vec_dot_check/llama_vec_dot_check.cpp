// llama_vec_dot_check: Strata's quantized dots against the peer's own CPU kernels
// (libggml-cpu-haswell.so of npm @node-llama-cpp/linux-x64@3.22.1, the build that produced the
// fixtures: llama.cpp's AVX2 paths), loaded with dlopen and called through their exported
// ggml_vec_dot_<type>_<act> symbols. Covers every weight type llama.cpp mixes into i-quant,
// K-quant and legacy files: IQ1_S..IQ4_XS, TQ1_0/TQ2_0, Q2_K..Q6_K, Q4_0..Q8_0, MXFP4.
//   llama_vec_dot_check [TYPE|all] [--isa NAME]
//       bitwise comparison on 1,800 random rows per type (fixture blocks, extreme rows, random
//       bytes; 256-value types 1..16 blocks, 32-value types 1..16 blocks and 3/5/7 odd counts),
//       for every kernel table this CPU has (or only --isa NAME): vec_dot, vec_dot_xn (1..9
//       tokens) and vec_dot_tile where the table has them. The activations are quantized by the
//       peer's quantize_row_<act>; Strata's own activation quantizer is compared byte for byte
//       on the same inputs ("act" column). Prints mismatches and the worst relative difference.
//   llama_vec_dot_check [TYPE|all] time
//       L2-hot GB/s of both (32 rows x 4096, thread CPU time, best of 15 interleaved runs).
//   llama_vec_dot_check [TYPE|all] dump FILE
//       writes golden dot products from the peer for the unit tests (tests/data/llama_dots,
//       read by tests/kernels/test_llama_dots.cpp): per type a few rows of fixture blocks and of
//       random bytes, the peer's activations and its float result.
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
typedef void (*ggml_q)(const float* x, void* y, int64_t k);
static std::vector<uint8_t> rd(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
static uint32_t bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

struct TypeCase { const char* stem; const char* sym; const char* act; };
static const TypeCase kCases[] = {
    {"iq2_xxs", "ggml_vec_dot_iq2_xxs_q8_K", "q8_K"}, {"iq2_xs", "ggml_vec_dot_iq2_xs_q8_K", "q8_K"},
    {"iq2_s", "ggml_vec_dot_iq2_s_q8_K", "q8_K"},     {"iq3_xxs", "ggml_vec_dot_iq3_xxs_q8_K", "q8_K"},
    {"iq3_s", "ggml_vec_dot_iq3_s_q8_K", "q8_K"},     {"iq1_s", "ggml_vec_dot_iq1_s_q8_K", "q8_K"},
    {"iq1_m", "ggml_vec_dot_iq1_m_q8_K", "q8_K"},     {"iq4_xs", "ggml_vec_dot_iq4_xs_q8_K", "q8_K"},
    {"iq4_nl", "ggml_vec_dot_iq4_nl_q8_0", "q8_0"},   {"tq1_0", "ggml_vec_dot_tq1_0_q8_K", "q8_K"},
    {"tq2_0", "ggml_vec_dot_tq2_0_q8_K", "q8_K"},     {"q2_k", "ggml_vec_dot_q2_K_q8_K", "q8_K"},
    {"q3_k", "ggml_vec_dot_q3_K_q8_K", "q8_K"},       {"q4_k", "ggml_vec_dot_q4_K_q8_K", "q8_K"},
    {"q5_k", "ggml_vec_dot_q5_K_q8_K", "q8_K"},       {"q6_k", "ggml_vec_dot_q6_K_q8_K", "q8_K"},
    {"q4_0", "ggml_vec_dot_q4_0_q8_0", "q8_0"},       {"q4_1", "ggml_vec_dot_q4_1_q8_1", "q8_1"},
    {"q5_0", "ggml_vec_dot_q5_0_q8_0", "q8_0"},       {"q5_1", "ggml_vec_dot_q5_1_q8_1", "q8_1"},
    {"q8_0", "ggml_vec_dot_q8_0_q8_0", "q8_0"},       {"mxfp4", "ggml_vec_dot_mxfp4_q8_0", "q8_0"},
};

static GgmlType act_type(const char* act) {
  if (!std::strcmp(act, "q8_K")) return GgmlType::Q8_K;
  if (!std::strcmp(act, "q8_1")) return GgmlType::Q8_1;
  return GgmlType::Q8_0;
}

int main(int argc, char** argv) {
  const char* peer = std::getenv("PEER_DIR");
  const std::string dir = std::string(peer ? peer : "/tmp/strata-peer") + "/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/";
  const char* fx = std::getenv("STRATA_FIXTURES");
  const std::string fixtures = std::string(fx ? fx : "../shared/fixtures") + "/quant-blocks/";
  if (!dlopen((dir + "libggml-base.so").c_str(), RTLD_NOW | RTLD_GLOBAL)) { std::printf("%s\n", dlerror()); return 1; }
  void* h = dlopen((dir + "libggml-cpu-haswell.so").c_str(), RTLD_NOW);
  if (!h) { std::printf("%s\n", dlerror()); return 1; }
  if (auto init = reinterpret_cast<void (*)()>(dlsym(h, "ggml_cpu_init"))) init();
  std::string which = argc > 1 ? argv[1] : "all", mode = "check", dump_path, only_isa;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "time") mode = "time";
    else if (a == "dump" && i + 1 < argc) { mode = "dump"; dump_path = argv[++i]; }
    else if (a == "--isa" && i + 1 < argc) only_isa = argv[++i];
  }
  const Isa isas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::AvxVnni};
  const KernelTable* tabs[4];
  for (int k = 0; k < 4; ++k) {
    tabs[k] = kernel_table(isas[k]);
    if (!only_isa.empty() && only_isa != isa_name(isas[k])) tabs[k] = nullptr;
  }
  std::FILE* dump = mode == "dump" ? std::fopen(dump_path.c_str(), "wb") : nullptr;
  if (mode == "dump" && !dump) { std::printf("cannot write %s\n", dump_path.c_str()); return 1; }
  int total_bad = 0;
  for (const TypeCase& tc : kCases) {
    if (which != "all" && which != tc.stem) continue;
    const GgmlType t = *ggml_type_from_name(tc.stem);
    const GgmlType at = act_type(tc.act);
    auto g = reinterpret_cast<ggml_vd>(dlsym(h, tc.sym));
    auto gq = reinterpret_cast<ggml_q>(dlsym(h, (std::string("quantize_row_") + tc.act).c_str()));
    if (!g || !gq) { std::printf("no %s / quantize_row_%s\n", tc.sym, tc.act); continue; }
    const auto blocks = rd(fixtures + tc.stem + ".blocks");
    const int64_t tsz = ggml_info(t).type_size, bsz = ggml_info(t).block_size, nb_g = static_cast<int64_t>(blocks.size()) / tsz;
    if (nb_g == 0) { std::printf("no fixture blocks for %s under %s\n", tc.stem, fixtures.c_str()); return 1; }
    std::mt19937 rng(5);
    if (mode == "dump") {
      // Rows of fixture blocks and of random bytes, 1..3 super-blocks or 1..8 32-value blocks
      // (llama.cpp pairs those, with an odd last one alone). Record (little-endian): char[8]
      // type stem, int32 n, uint32 result bits, uint32 weight bytes, uint32 activation bytes,
      // the weight row, the activation row (quantized by the peer).
      const std::vector<int> counts = bsz == 256 ? std::vector<int>{1, 2, 3} : std::vector<int>{1, 2, 3, 5, 8};
      int rows = 0;
      for (int nblk : counts) for (int rep = 0; rep < 2; ++rep) {
        const int64_t n = bsz * nblk;
        std::vector<uint8_t> w(nblk * tsz);
        for (int b = 0; b < nblk; ++b) std::memcpy(w.data() + b * tsz, blocks.data() + (rng() % nb_g) * tsz, tsz);
        if (rep == 1) for (auto& c : w) c = (rng() & 0x2F) | 0x10;
        std::vector<float> x(n);
        std::normal_distribution<float> nd(0, 1);
        const float sc = std::pow(10.0f, float(int(rng() % 5)) - 2);
        for (auto& v : x) v = sc * nd(rng) * (rng() % 17 == 0 ? 8.f : 1.f);
        std::vector<uint8_t> a(ggml_row_size(at, n));
        gq(x.data(), a.data(), n);
        float ref; g(int(n), &ref, 0, w.data(), 0, a.data(), 0, 1);
        char name[8] = {};
        std::strncpy(name, tc.stem, sizeof name);
        const int32_t n32 = static_cast<int32_t>(n);
        const uint32_t rb = bits(ref), wn = static_cast<uint32_t>(w.size()), an = static_cast<uint32_t>(a.size());
        std::fwrite(name, 1, 8, dump);
        std::fwrite(&n32, 4, 1, dump);
        std::fwrite(&rb, 4, 1, dump);
        std::fwrite(&wn, 4, 1, dump);
        std::fwrite(&an, 4, 1, dump);
        std::fwrite(w.data(), 1, w.size(), dump);
        std::fwrite(a.data(), 1, a.size(), dump);
        ++rows;
      }
      std::printf("%-8s %d rows dumped\n", tc.stem, rows);
      continue;
    }
    if (mode == "check") {
      int mism[4] = {}, mism_xn[4] = {}, mism_tile[4] = {}, total = 0, act_bad = 0;
      double worst[4] = {};
      const int nblks_k[] = {1, 2, 3, 5, 8, 16}, nblks_32[] = {1, 2, 3, 5, 7, 16};
      for (int bi = 0; bi < 6; ++bi) for (int rep = 0; rep < 300; ++rep) {
        const int nblk = bsz == 256 ? nblks_k[bi] : nblks_32[bi];
        const int64_t n = bsz * nblk;
        std::vector<uint8_t> w(nblk * tsz);
        for (int b = 0; b < nblk; ++b) {
          int64_t src;
          do src = rng() % nb_g; while (rep % 2 == 0 && nb_g > 22 && (src == 5 || src == 21 || src == 18));
          std::memcpy(w.data() + b * tsz, blocks.data() + src * tsz, tsz);
        }
        if (rep % 3 == 2) for (auto& c : w) c = (rng() & 0x2F) | 0x10;  // bench-style bytes
        std::vector<float> x(n);
        std::normal_distribution<float> nd(0, 1);
        const float sc = std::pow(10.0f, float(int(rng() % 5)) - 2);
        for (auto& v : x) v = sc * nd(rng) * (rng() % 17 == 0 ? 8.f : 1.f);
        const size_t arow = ggml_row_size(at, n);
        std::vector<uint8_t> a(arow), a_own(arow);
        gq(x.data(), a.data(), n);
        for (int k = 0; k < 4; ++k) {
          if (!tabs[k] || !tabs[k]->quantize_act[uint32_t(at)]) continue;
          tabs[k]->quantize_act[uint32_t(at)](x.data(), a_own.data(), n);
          if (std::memcmp(a.data(), a_own.data(), arow) != 0) { ++act_bad; break; }
        }
        float ref; g(int(n), &ref, 0, w.data(), 0, a.data(), 0, 1);
        ++total;
        auto differs = [&](float got) { return bits(got) != bits(ref) && !(std::isnan(got) && std::isnan(ref)); };
        // A batch of tokens whose row `pos` is this activation (the others: scaled copies).
        const int ntok = 1 + rep % 9, pos = rep % ntok;
        std::vector<uint8_t> batch(arow * ntok);
        for (int tk = 0; tk < ntok; ++tk) {
          if (tk == pos) { std::memcpy(batch.data() + tk * arow, a.data(), arow); continue; }
          std::vector<float> xs(x);
          for (auto& v : xs) v *= 0.5f + tk;
          gq(xs.data(), batch.data() + tk * arow, n);
        }
        for (int k = 0; k < 4; ++k) {
          if (!tabs[k]) continue;
          const float got = tabs[k]->vec_dot[uint32_t(t)](n, w.data(), a.data());
          if (differs(got)) {
            ++mism[k];
            if (std::isfinite(ref) && ref != 0) worst[k] = std::max(worst[k], std::fabs(double(got) - ref) / std::fabs(ref));
          }
          if (auto xn = tabs[k]->vec_dot_xn[uint32_t(t)]) {
            std::vector<float> y(ntok);
            xn(n, w.data(), batch.data(), arow, ntok, y.data(), 1);
            if (differs(y[pos])) ++mism_xn[k];
          }
          if (auto tile = tabs[k]->vec_dot_tile[uint32_t(t)]) {
            const int nr = 1 + rep % 4;
            std::vector<uint8_t> wr(w.size() * nr);
            for (int r = 0; r < nr; ++r) std::memcpy(wr.data() + r * w.size(), w.data(), w.size());
            std::vector<float> y(ntok * nr);
            tile(n, wr.data(), w.size(), nr, batch.data(), arow, ntok, y.data(), nr);
            if (differs(y[pos * nr + nr - 1])) ++mism_tile[k];
          }
        }
      }
      int bad = act_bad;
      for (int k = 0; k < 4; ++k) bad += mism[k] + mism_xn[k] + mism_tile[k];
      total_bad += bad;
      std::printf("%-8s rows %d act %d |", tc.stem, total, act_bad);
      for (int k = 0; k < 4; ++k) {
        if (!tabs[k]) continue;
        std::printf(" %s %d/%d/%d (%.1e)", tabs[k]->name, mism[k], mism_xn[k], mism_tile[k], worst[k]);
      }
      std::printf("%s\n", bad ? "  MISMATCH" : "");
    } else {
      const int64_t cols = 4096, rows = 32;
      const size_t rb = ggml_row_size(t, cols);
      std::vector<uint8_t> w(rows * rb);
      for (auto& c : w) c = (rng() & 0x2F) | 0x10;
      std::vector<float> x(cols, 0.25f);
      std::vector<uint8_t> a(ggml_row_size(at, cols));
      gq(x.data(), a.data(), cols);
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
      for (int k = 0; k < 4; ++k) gb[k] = tabs[k] ? 40.0 * rows * rb / best[k] / 1e9 : 0;
      std::printf("%-8s L2-hot GB/s  llama.cpp %.2f | scalar %.2f avx2 %.2f avx512 %.2f vnni %.2f | avx2/llama %.2f\n", tc.stem, gl, gb[0], gb[1], gb[2], gb[3], gb[1] / gl);
    }
  }
  if (dump) std::fclose(dump);
  return mode == "check" && total_bad ? 2 : 0;
}
