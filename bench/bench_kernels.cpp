// Kernel lab benchmark: DRAM read bandwidth, then matmul n=1 (gemv) per weight format, thread
// count and kernel table over a weight matrix much larger than L3, reported as weight bytes
// streamed per second and as a fraction of the measured DRAM read bandwidth; then prompt-size
// GEMM (n = 8..512 tokens, `--benchmark_filter=gemm/`): tokens/s and GFLOP/s of the per-token
// vec_dot path, the multi-token int8 vec_dot_xn kernels and OpenBLAS sgemm on dequantized tiles.
// Plain run (`bench_kernels`) runs everything briefly and prints a summary table at the end;
// Google Benchmark flags (--benchmark_filter=..., --benchmark_min_time=...) work as usual.
#include <benchmark/benchmark.h>
#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#ifdef STRATA_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include "core/thread_pool.h"
#include "gguf/ggml_type.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul.h"
#include "kernels/quants.h"

namespace strata {
namespace {

constexpr size_t kWeightBytes = size_t{256} << 20;  // >> L3 (32 MiB here)
constexpr int64_t kCols = 4096;
constexpr double kMinTime = 0.3;  // seconds per benchmark

ThreadPool& pool(int threads) {
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  auto& p = pools[threads];
  if (!p) p = std::make_unique<ThreadPool>(threads);
  return *p;
}

// Results for the summary: GB/s by row label and column label.
struct Result {
  double gbps = 0;
  double ratio = 0;  // gbps / DRAM read bandwidth measured right before and after (0: n/a)
};
std::map<std::string, std::map<std::string, Result>>& results() {
  static std::map<std::string, std::map<std::string, Result>> r;
  return r;
}
// Fraction of a core the calling thread got during the single-thread runs (the machine may be
// shared: below ~0.9 the figures understate what the kernels do on an idle machine).
double& min_cpu_share() {
  static double v = 1.0;
  return v;
}
double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
std::string loadavg() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  char buf[64] = "?";
  if (f) {
    if (!std::fgets(buf, sizeof buf, f)) buf[0] = 0;
    std::fclose(f);
  }
  std::string s(buf);
  return s.substr(0, s.find(' ', s.find(' ', s.find(' ') + 1) + 1));
}

std::map<int, double>& dram_gbps() {
  static std::map<int, double> d;
  return d;
}

// ---- DRAM read bandwidth: sum of a large float array, split across threads ----------------

const std::vector<float>& dram_buffer() {
  static const std::vector<float> buf = [] {
    std::vector<float> b(kWeightBytes / sizeof(float));
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i & 255);
    return b;
  }();
  return buf;
}

// SSE (the x86-64 baseline this file is built for) or NEON: 16-byte loads keep far ahead of DRAM.
#if defined(__x86_64__)
float sum_range(const float* p, int64_t n) {
  __m128 s0 = _mm_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i + 16 <= n; i += 16) {
    s0 = _mm_add_ps(s0, _mm_loadu_ps(p + i));
    s1 = _mm_add_ps(s1, _mm_loadu_ps(p + i + 4));
    s2 = _mm_add_ps(s2, _mm_loadu_ps(p + i + 8));
    s3 = _mm_add_ps(s3, _mm_loadu_ps(p + i + 12));
  }
  const __m128 s = _mm_add_ps(_mm_add_ps(s0, s1), _mm_add_ps(s2, s3));
  alignas(16) float t[4];
  _mm_store_ps(t, s);
  return t[0] + t[1] + t[2] + t[3];
}
#elif defined(__aarch64__)
float sum_range(const float* p, int64_t n) {
  float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i + 16 <= n; i += 16) {
    s0 = vaddq_f32(s0, vld1q_f32(p + i));
    s1 = vaddq_f32(s1, vld1q_f32(p + i + 4));
    s2 = vaddq_f32(s2, vld1q_f32(p + i + 8));
    s3 = vaddq_f32(s3, vld1q_f32(p + i + 12));
  }
  return vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
}
#else
float sum_range(const float* p, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += p[i];
  return s;
}
#endif

void BM_DramRead(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const auto& buf = dram_buffer();
  ThreadPool& tp = pool(threads);
  float partial[64] = {};
  double secs = 0;
  int64_t iters = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    tp.parallel_for(static_cast<int64_t>(buf.size()), 1 << 16, [&](int64_t b, int64_t e, int tid) {
      partial[tid] += sum_range(buf.data() + b, e - b);
    });
    secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++iters;
    benchmark::DoNotOptimize(partial);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(buf.size() * sizeof(float)));
  const double gbps = iters * double(kWeightBytes) / secs / 1e9;
  dram_gbps()[threads] = gbps;
  (void)gbps;
}

// ---- gemv per format --------------------------------------------------------------------

struct Weights {
  GgmlType type = GgmlType::F32;
  QMatrix m;
  std::vector<uint8_t> bytes;
};

// Random bytes in 0x10..0x3F: every f16 / bf16 / e8m0 field is then a normal, finite number
// (no NaN/denormal slow paths); the code bytes are random enough for timing.
const Weights& weights(GgmlType t) {
  static Weights w;
  if (!w.bytes.empty() && w.type == t) return w;
  w.type = t;
  const size_t row_bytes = ggml_row_size(t, kCols);
  const int64_t rows = static_cast<int64_t>(kWeightBytes / row_bytes);
  w.bytes.assign(rows * row_bytes, 0);
  std::mt19937_64 rng(static_cast<uint64_t>(t) + 1);
  for (size_t i = 0; i + 8 <= w.bytes.size(); i += 8) {
    const uint64_t r = (rng() & 0x2F2F2F2F2F2F2F2FULL) | 0x1010101010101010ULL;
    std::memcpy(w.bytes.data() + i, &r, 8);
  }
  w.m = QMatrix{t, rows, kCols, w.bytes.data(), row_bytes};
  return w;
}

// DRAM read bandwidth right now (two passes over the buffer). The machine may be shared, so
// each gemv benchmark is compared with a measurement taken just before and just after it.
double dram_now(int threads) {
  const auto& buf = dram_buffer();
  float partial[64] = {};
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 2; ++i)
    pool(threads).parallel_for(static_cast<int64_t>(buf.size()), 1 << 16, [&](int64_t b, int64_t e, int tid) {
      partial[tid] += sum_range(buf.data() + b, e - b);
    });
  benchmark::DoNotOptimize(partial);
  return 2 * double(kWeightBytes) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9;
}

void BM_Gemv(benchmark::State& state, Isa isa, GgmlType t) {
  const int threads = static_cast<int>(state.range(0));
  const std::string row = std::string(ggml_type_name(t));
  const std::string col = std::string(isa_name(isa)) + " " + std::to_string(threads) + "T";
  const KernelTable* k = kernel_table(isa);
  if (!k) {
    state.SkipWithError("ISA not supported by this CPU");
    return;
  }
  const GgmlType at = matmul_act_type(t);
  if (!k->vec_dot[static_cast<uint32_t>(t)] || (at != GgmlType::F32 && !k->quantize_act[static_cast<uint32_t>(at)])) {
    state.SkipWithError("no kernel for this format in this table");
    return;
  }
  const Weights& w = weights(t);
  std::vector<float> x(kCols), y(w.m.rows);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : x) v = nd(rng);
  MatmulScratch s;
  ThreadPool& tp = pool(threads);
  matmul(*k, &tp, w.m, x.data(), 1, y.data(), s);  // warm-up (page faults, scratch)
  const double dram_before = dram_now(threads);
  double secs = 0;
  int64_t iters = 0;
  const double cpu0 = thread_cpu_seconds();
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    matmul(*k, &tp, w.m, x.data(), 1, y.data(), s);
    secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++iters;
    benchmark::DoNotOptimize(y.data());
  }
  if (threads == 1) min_cpu_share() = std::min(min_cpu_share(), (thread_cpu_seconds() - cpu0) / secs);
  const double dram = 0.5 * (dram_before + dram_now(threads));
  const double bytes = double(w.m.rows) * double(w.m.row_stride_bytes);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
  const double gbps = iters * bytes / secs / 1e9;
  state.counters["dram_ratio"] = gbps / dram;
  state.counters["dram_GBps"] = dram;
  results()[row][col] = {gbps, gbps / dram};
}

// Same kernels on a matrix that stays in L2 (one thread): the compute ceiling of each kernel
// (GB/s per core of CPU time), to compare with the DRAM bandwidth it has to keep up with.
void BM_GemvHot(benchmark::State& state, Isa isa, GgmlType t) {
  const KernelTable* k = kernel_table(isa);
  const GgmlType at = matmul_act_type(t);
  if (!k || !k->vec_dot[static_cast<uint32_t>(t)] || (at != GgmlType::F32 && !k->quantize_act[static_cast<uint32_t>(at)])) {
    state.SkipWithError("no kernel for this format in this table");
    return;
  }
  const size_t row_bytes = ggml_row_size(t, kCols);
  const int64_t rows = 32;  // <= 256 KiB
  std::vector<uint8_t> wb(rows * row_bytes);
  std::mt19937_64 rng(3);
  for (size_t i = 0; i + 8 <= wb.size(); i += 8) {
    const uint64_t r = (rng() & 0x2F2F2F2F2F2F2F2FULL) | 0x1010101010101010ULL;
    std::memcpy(wb.data() + i, &r, 8);
  }
  const QMatrix m{t, rows, kCols, wb.data(), row_bytes};
  std::vector<float> x(kCols, 0.25f), y(rows);
  MatmulScratch s;
  double secs = 0;
  int64_t iters = 0;
  for (auto _ : state) {
    // Thread CPU time, not wall time: a compute ceiling should not count time the thread
    // spent descheduled on a shared machine.
    const double t0 = thread_cpu_seconds();
    for (int rep = 0; rep < 16; ++rep) matmul(*k, nullptr, m, x.data(), 1, y.data(), s);
    secs += thread_cpu_seconds() - t0;
    ++iters;
    benchmark::DoNotOptimize(y.data());
  }
  const double bytes = 16.0 * double(rows * row_bytes);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
  results()[ggml_type_name(t)][std::string(isa_name(isa)) + " L2-hot 1T"] = {iters * bytes / secs / 1e9, 0};
}

// ---- prompt-size GEMM (`--benchmark_filter=gemm/`) -----------------------------------------
// matmul of n tokens against one matrix, per path:
//   old     vec_dot per token (n = 512 only: the baseline of the multi-token kernels)
//   int8    what matmul does: activations quantized to Q8_0 / Q8_K, multi-token vec_dot_xn
//   i8-512  the same with the AVX-512 VNNI table (where the CPU has it; bit-identical results)
//   i8-vnni the same with the 256-bit VNNI table (AVX-VNNI, or its EVEX form on AVX-512)
//   int8-row / i8-512-row  int8 / i8-512 without the rows x tokens tile kernels (vec_dot_tile):
//           each row through vec_dot_xn alone; the baseline of the tiles (i-quants that have them)
//   blas    matmul_blas (what `--gemm blas` runs for n >= 128): weight tiles of up to 128 rows
//           dequantized into a reused f32 buffer, then OpenBLAS cblas_sgemm against the f32
//           activations; at 2 threads our pool hands tiles to the threads and OpenBLAS runs
//           single-threaded in each
//   blasob  the same with OpenBLAS's own 2 threads (tiles dequantized by the calling thread)
//   sgemm   cblas_sgemm alone on the matrix dequantized beforehand (1 thread; the ceiling of
//           blas without the dequantization)
// 1T figures are per second of the calling thread's CPU time (the machine may be shared), 2T
// per second of wall time. The summary prints medians over --benchmark_repetitions.

constexpr int64_t kGemmTokens[] = {4, 8, 32, 128, 512};

enum class GemmPath { Old, Int8, Int8Avx512, Int8Vnni, Int8Row, Int8Avx512Row, Blas, BlasOb, Sgemm };
const char* gemm_path_name(GemmPath p) {
  switch (p) {
    case GemmPath::Old: return "old";
    case GemmPath::Int8: return "int8";
    case GemmPath::Int8Avx512: return "i8-512";
    case GemmPath::Int8Vnni: return "i8-vnni";
    case GemmPath::Int8Row: return "int8-row";
    case GemmPath::Int8Avx512Row: return "i8-512-row";
    case GemmPath::Blas: return "blas";
    case GemmPath::BlasOb: return "blasob";
    case GemmPath::Sgemm: return "sgemm";
  }
  return "?";
}

// Summary key: format, rows, cols, tokens (ordered numerically); value: tokens/s per run.
using GemmKey = std::tuple<std::string, int64_t, int64_t, int64_t>;
std::map<GemmKey, std::map<std::string, std::vector<double>>>& gemm_results() {
  static std::map<GemmKey, std::map<std::string, std::vector<double>>> r;
  return r;
}

void BM_Gemm(benchmark::State& state, GgmlType t, int64_t rows, int64_t cols, int64_t n, GemmPath path) {
  const int threads = static_cast<int>(state.range(0));
  // The int8 paths' base table: AVX2 on x86-64, the best NEON table on ARM64.
#if defined(__aarch64__)
  const Isa int8_isa = kernels().isa;
#else
  const Isa int8_isa = Isa::Avx2;
#endif
  const KernelTable* base = kernel_table(path == GemmPath::Int8Avx512 || path == GemmPath::Int8Avx512Row ? Isa::Avx512
                                         : path == GemmPath::Int8Vnni                                      ? Isa::AvxVnni
                                                                                                           : int8_isa);
  if (!base || !base->vec_dot[static_cast<uint32_t>(t)]) {
    state.SkipWithError("no kernel table for this path on this CPU");
    return;
  }
#ifndef STRATA_HAVE_OPENBLAS
  if (path == GemmPath::Blas || path == GemmPath::BlasOb || path == GemmPath::Sgemm) {
    state.SkipWithError("built without OpenBLAS (pkg-config openblas not found)");
    return;
  }
#endif
  KernelTable k = *base;
  if (path == GemmPath::Old)
    for (auto& f : k.vec_dot_xn) f = nullptr;
  if (path == GemmPath::Old || path == GemmPath::Int8Row || path == GemmPath::Int8Avx512Row)
    for (auto& f : k.vec_dot_tile) f = nullptr;
  const ToFloatFn deq = k.dequantize[static_cast<uint32_t>(t)] ? k.dequantize[static_cast<uint32_t>(t)]
                                                                : quant_traits(t).to_float;
  const size_t row_bytes = ggml_row_size(t, cols);
  std::vector<uint8_t> wb(rows * row_bytes);
  std::mt19937_64 rng(static_cast<uint64_t>(t) * 31 + rows);
  for (size_t i = 0; i + 8 <= wb.size(); i += 8) {
    const uint64_t r = (rng() & 0x2F2F2F2F2F2F2F2FULL) | 0x1010101010101010ULL;
    std::memcpy(wb.data() + i, &r, 8);
  }
  const QMatrix m{t, rows, cols, wb.data(), row_bytes};
  std::vector<float> x(n * cols), y(n * rows);
  std::mt19937 xr(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : x) v = nd(xr);
  MatmulScratch s;
  ThreadPool* tp = threads == 1 ? nullptr : &pool(threads);
  [[maybe_unused]] std::vector<float> wf;
  if (path == GemmPath::Sgemm) {
    wf.resize(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) deq(m.row(r), wf.data() + r * cols, cols);
  }
  auto once = [&] {
    switch (path) {
      case GemmPath::Old:
      case GemmPath::Int8:
      case GemmPath::Int8Avx512:
      case GemmPath::Int8Vnni:
      case GemmPath::Int8Row:
      case GemmPath::Int8Avx512Row: matmul(k, tp, m, x.data(), n, y.data(), s); break;
#ifdef STRATA_HAVE_OPENBLAS
      case GemmPath::Blas:
        openblas_set_num_threads(1);
        matmul_blas(k, tp, m, x.data(), n, y.data(), s);
        break;
      case GemmPath::BlasOb:
        openblas_set_num_threads(threads);
        matmul_blas(k, nullptr, m, x.data(), n, y.data(), s);
        break;
      case GemmPath::Sgemm:
        openblas_set_num_threads(threads);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(rows),
                    static_cast<int>(cols), 1.0f, x.data(), static_cast<int>(cols), wf.data(), static_cast<int>(cols),
                    0.0f, y.data(), static_cast<int>(rows));
        break;
#endif
      default: break;
    }
  };
  once();  // warm-up (scratch, OpenBLAS buffers)
  if (path != GemmPath::Old && path != GemmPath::Int8 && path != GemmPath::Int8Avx512 && path != GemmPath::Int8Vnni &&
      path != GemmPath::Int8Row && path != GemmPath::Int8Avx512Row) {
    // Validation: the f32 product against the int8 one (they differ by the activations'
    // 8-bit rounding only: ~1e-2 relative).
    std::vector<float> y8(y.size());
    MatmulScratch s8;
    matmul(k, nullptr, m, x.data(), n, y8.data(), s8);
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < y.size(); ++i) d2 += double(y[i] - y8[i]) * (y[i] - y8[i]), r2 += double(y8[i]) * y8[i];
    state.counters["rel_diff"] = std::sqrt(d2 / r2);
    if (!(d2 <= 1e-3 * r2)) {
      state.SkipWithError("BLAS product differs from the int8 one");
      return;
    }
  }
  double secs = 0;
  int64_t iters = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = thread_cpu_seconds();
    once();
    secs += threads > 1 ? std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
                        : thread_cpu_seconds() - c0;
    ++iters;
    benchmark::DoNotOptimize(y.data());
  }
#ifdef STRATA_HAVE_OPENBLAS
  openblas_set_num_threads(1);
#endif
  const double tok_s = iters * double(n) / secs;
  state.counters["tok_s"] = tok_s;
  state.counters["GFLOPs"] = tok_s * 2.0 * double(rows) * double(cols) / 1e9;
  gemm_results()[{ggml_type_name(t), rows, cols, n}][std::string(gemm_path_name(path)) + " " + std::to_string(threads) + "T"]
      .push_back(tok_s);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

void print_gemm_summary() {
  auto& r = gemm_results();
  if (r.empty()) return;
#ifdef STRATA_HAVE_OPENBLAS
  std::printf("\nmatmul with n tokens (prompt GEMM), AVX2 kernels (i8-512: AVX-512 VNNI), %s.\n", openblas_get_config());
#else
  std::printf("\nmatmul with n tokens (prompt GEMM), AVX2 kernels (i8-512: AVX-512 VNNI); built without OpenBLAS: no blas columns.\n");
#endif
  std::printf("Cells: median tokens/s (GFLOP/s) over the repetitions; 1T per second of thread CPU time, 2T\n"
              "per second of wall time. blas/int8: best BLAS variant over int8 at that thread count.\n");
  const char* cols[] = {"old 1T",  "int8-row 1T", "int8 1T",    "i8-vnni 1T", "i8-512-row 1T", "i8-512 1T", "blas 1T",
                        "sgemm 1T", "old 2T",      "int8-row 2T", "int8 2T",    "i8-vnni 2T",    "i8-512-row 2T", "i8-512 2T",
                        "blas 2T",  "blasob 2T"};
  std::vector<const char*> shown;
  for (const char* c : cols)
    for (auto& [_, m] : r)
      if (m.count(c)) {
        shown.push_back(c);
        break;
      }
  std::printf("%-22s", "weights (rows x K), n");
  for (const char* c : shown) std::printf(" %17s", c);
  std::printf(" %9s %9s\n", "blas/int8", "blas/int8");
  std::printf("%-22s", "");
  for (size_t i = 0; i < shown.size(); ++i) std::printf(" %17s", "");
  std::printf(" %9s %9s\n", "1T", "2T");
  for (auto& [key, m] : r) {
    const auto& [type, rows, kc, n] = key;
    char label[64];
    std::snprintf(label, sizeof label, "%s %lldx%lld n=%lld", type.c_str(), static_cast<long long>(rows),
                  static_cast<long long>(kc), static_cast<long long>(n));
    std::printf("%-22s", label);
    const double flop_per_tok = 2.0 * double(rows) * double(kc);
    auto med = [&](const std::string& c) { auto it = m.find(c); return it == m.end() ? 0.0 : median(it->second); };
    for (const char* c : shown) {
      char cell[64] = "-";
      if (const double v = med(c); v > 0) std::snprintf(cell, sizeof cell, "%.0f (%.1f)", v, v * flop_per_tok / 1e9);
      std::printf(" %17s", cell);
    }
    for (const char* th : {"1T", "2T"}) {
      const double i8 = med(std::string("int8 ") + th);
      const double bl = std::max(med(std::string("blas ") + th), med(std::string("blasob ") + th));
      if (i8 > 0 && bl > 0) std::printf(" %9.2f", bl / i8);
      else std::printf(" %9s", "-");
    }
    std::printf("\n");
  }
}

void print_summary() {
  auto& r = results();
  if (r.empty() && dram_gbps().empty()) return;
  std::printf("\nload average at the end: %s; least CPU share of the 1-thread gemv runs: %.2f "
              "(machine shared when < ~0.9: figures then understate the kernels)\n",
              loadavg().c_str(), min_cpu_share());
  std::printf("DRAM read bandwidth (sum of a %zu MiB array):", kWeightBytes >> 20);
  for (auto& [t, g] : dram_gbps()) std::printf("  %dT %.2f GB/s", t, g);
  std::printf("\n\nmatmul n=1 (gemv), %zu MiB of weights, %lld columns: GB/s of weights streamed (1 GB = 1e9 B);\n"
              "(x.xx) = fraction of the DRAM read bandwidth measured right before/after at the same thread count\n",
              kWeightBytes >> 20, static_cast<long long>(kCols));
  std::vector<std::string> cols;
  for (const char* isa : {"scalar", "avx2", "avxvnni", "avx512"})
    for (const char* c : {" 1T", " 2T", " L2-hot 1T"}) {
      const std::string name = std::string(isa) + c;
      for (auto& [_, m] : r)
        if (m.count(name)) {
          cols.push_back(name);
          break;
        }
    }
  std::printf("%-8s", "format");
  for (auto& c : cols) std::printf(" %15s", c.c_str());
  std::printf("\n");
  for (auto& [row, m] : r) {
    std::printf("%-8s", row.c_str());
    for (auto& c : cols) {
      char cell[64] = "-";
      if (auto it = m.find(c); it != m.end()) {
        if (it->second.ratio > 0) std::snprintf(cell, sizeof cell, "%.2f (%.2f)", it->second.gbps, it->second.ratio);
        else std::snprintf(cell, sizeof cell, "%.2f", it->second.gbps);
      }
      std::printf(" %15s", cell);
    }
    std::printf("\n");
  }
}

void register_all() {
  // Prompt GEMM: one Qwen3-30B-A3B expert (up/gate 768x2048, down 2048x768) and a dense
  // 4096x2048 projection; n = 8..512 tokens. The OpenBLAS-threaded cases run last (its
  // threads keep spinning for a while after a call).
  const GgmlType gemm_formats[] = {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q5_K,
                                   GgmlType::Q4_0, GgmlType::IQ4_XS, GgmlType::MXFP4,
                                   GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS,
                                   GgmlType::IQ3_S, GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::TQ1_0, GgmlType::TQ2_0};
  const int64_t shapes[][2] = {{768, 2048}, {2048, 768}, {4096, 2048}};
  auto reg_gemm = [&](GgmlType t, const int64_t* sh, int64_t n, GemmPath p, std::initializer_list<int> threads) {
    const std::string name = std::string("gemm/") + ggml_type_name(t) + "/" + std::to_string(sh[0]) + "x" +
                             std::to_string(sh[1]) + "/n" + std::to_string(n) + "/" + gemm_path_name(p);
    auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_Gemm, t, sh[0], sh[1], n, p);
    for (int th : threads) b->Arg(th);
    b->ArgName("threads")->MinTime(kMinTime)->UseRealTime();
  };
  // The BLAS comparison (all n) for the formats of the Qwen3 MoE fixtures; the others at
  // n = 512, old vs int8 only.
  // The synthetic IQ2_XXS Qwen3 file's types (experts IQ2_XXS, attention IQ3_S) also at n < 512
  // (int8 paths): an expert sees ~4 tokens of a 64-token prompt.
  auto full = [](GgmlType t) { return t == GgmlType::Q4_K || t == GgmlType::Q6_K || t == GgmlType::Q8_0; };
  auto iq_pp = [](GgmlType t) { return t == GgmlType::IQ2_XXS || t == GgmlType::IQ3_S; };
  for (GgmlType t : gemm_formats)
    for (const auto& sh : shapes)
      for (int64_t n : kGemmTokens) {
        if ((n != 512 && !full(t) && !iq_pp(t)) || (n == 4 && !iq_pp(t))) continue;
        if (n == 512) reg_gemm(t, sh, n, GemmPath::Old, {1, 2});
        reg_gemm(t, sh, n, GemmPath::Int8, {1, 2});
        if (kernel_table(Isa::AvxVnni)) reg_gemm(t, sh, n, GemmPath::Int8Vnni, {1, 2});
        if (kernel_table(Isa::Avx512)) reg_gemm(t, sh, n, GemmPath::Int8Avx512, {1, 2});
        if (const KernelTable* a2 = kernel_table(Isa::Avx2); a2 && a2->vec_dot_tile[static_cast<uint32_t>(t)] && n >= 32) {
          reg_gemm(t, sh, n, GemmPath::Int8Row, {1, 2});
          if (kernel_table(Isa::Avx512)) reg_gemm(t, sh, n, GemmPath::Int8Avx512Row, {1, 2});
        }
        if (!full(t)) continue;
        reg_gemm(t, sh, n, GemmPath::Blas, {1, 2});
        reg_gemm(t, sh, n, GemmPath::Sgemm, {1});
      }
  for (GgmlType t : gemm_formats)
    for (const auto& sh : shapes)
      for (int64_t n : kGemmTokens)
        if (full(t) && n != 4) reg_gemm(t, sh, n, GemmPath::BlasOb, {2});
  benchmark::RegisterBenchmark("dram_read", BM_DramRead)->Arg(1)->Arg(2)->MinTime(kMinTime)->UseRealTime();
  const GgmlType formats[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                              GgmlType::IQ4_XS, GgmlType::MXFP4, GgmlType::F16, GgmlType::BF16,
                              GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS,
                              GgmlType::IQ3_S, GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::TQ1_0, GgmlType::TQ2_0};
  for (GgmlType t : formats)
    for (Isa isa : kAllIsas) {
      if (isa != Isa::Scalar && !kernel_table(isa)) continue;
      const std::string name = std::string("gemv/") + ggml_type_name(t) + "/" + isa_name(isa);
      benchmark::RegisterBenchmark(name.c_str(), BM_Gemv, isa, t)->Arg(1)->Arg(2)->ArgName("threads")->MinTime(kMinTime)->UseRealTime();
    }
  for (GgmlType t : formats)
    for (Isa isa : kSimdIsas) {
      if (!kernel_table(isa)) continue;
      const std::string name = std::string("gemv_l2hot/") + ggml_type_name(t) + "/" + isa_name(isa);
      benchmark::RegisterBenchmark(name.c_str(), BM_GemvHot, isa, t)->MinTime(0.1)->UseRealTime();
    }
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  strata::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  strata::print_summary();
  strata::print_gemm_summary();
  return 0;
}
