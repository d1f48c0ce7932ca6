// Kernel lab benchmark: DRAM read bandwidth, then matmul n=1 (gemv) per weight format, thread
// count and kernel table over a weight matrix much larger than L3, reported as weight bytes
// streamed per second and as a fraction of the measured DRAM read bandwidth; then prompt-size
// GEMM (512 tokens, `--benchmark_filter=gemm/`): tokens/s and GFLOP/s, per-token vec_dot path
// vs the multi-token vec_dot_xn kernels.
// Plain run (`bench_kernels`) runs everything briefly and prints a summary table at the end;
// Google Benchmark flags (--benchmark_filter=..., --benchmark_min_time=...) work as usual.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "gguf/ggml_type.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul.h"

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

float sum_range(const float* p, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(p + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(p + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_loadu_ps(p + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_loadu_ps(p + i + 24));
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
  alignas(32) float t[8];
  _mm256_store_ps(t, s);
  return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

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

// ---- prompt-size GEMM: matmul with many tokens, old path (vec_dot per token) vs new ------
// (vec_dot_xn: one weight row against several tokens, each weight block unpacked once).

constexpr int64_t kGemmTokens = 512;

struct GemmResult {
  double tok_s = 0, gflops = 0;
};
// [type + shape][path + threads]
std::map<std::string, std::map<std::string, GemmResult>>& gemm_results() {
  static std::map<std::string, std::map<std::string, GemmResult>> r;
  return r;
}

void BM_Gemm(benchmark::State& state, GgmlType t, int64_t rows, int64_t cols, bool use_xn) {
  const int threads = static_cast<int>(state.range(0));
  const KernelTable* base = kernel_table(Isa::Avx2);
  if (!base || !base->vec_dot[static_cast<uint32_t>(t)]) {
    state.SkipWithError("no AVX2 kernel for this format");
    return;
  }
  KernelTable k = *base;
  if (!use_xn)
    for (auto& f : k.vec_dot_xn) f = nullptr;
  const size_t row_bytes = ggml_row_size(t, cols);
  std::vector<uint8_t> wb(rows * row_bytes);
  std::mt19937_64 rng(static_cast<uint64_t>(t) * 31 + rows);
  for (size_t i = 0; i + 8 <= wb.size(); i += 8) {
    const uint64_t r = (rng() & 0x2F2F2F2F2F2F2F2FULL) | 0x1010101010101010ULL;
    std::memcpy(wb.data() + i, &r, 8);
  }
  const QMatrix m{t, rows, cols, wb.data(), row_bytes};
  std::vector<float> x(kGemmTokens * cols), y(kGemmTokens * rows);
  std::mt19937 xr(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : x) v = nd(xr);
  MatmulScratch s;
  // One thread: run on the calling thread and count its CPU time (the machine may be shared:
  // wall time would count time spent descheduled). Two threads: wall time.
  ThreadPool* tp = threads == 1 ? nullptr : &pool(threads);
  matmul(k, tp, m, x.data(), kGemmTokens, y.data(), s);  // warm-up
  double secs = 0;
  int64_t iters = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = thread_cpu_seconds();
    matmul(k, tp, m, x.data(), kGemmTokens, y.data(), s);
    secs += tp ? std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() : thread_cpu_seconds() - c0;
    ++iters;
    benchmark::DoNotOptimize(y.data());
  }
  const double tok_s = iters * double(kGemmTokens) / secs;
  const double gflops = tok_s * 2.0 * double(rows) * double(cols) / 1e9;
  state.counters["tok_s"] = tok_s;
  state.counters["GFLOPs"] = gflops;
  const std::string row = std::string(ggml_type_name(t)) + " " + std::to_string(rows) + "x" + std::to_string(cols);
  gemm_results()[row][std::string(use_xn ? "new " : "old ") + std::to_string(threads) + "T"] = {tok_s, gflops};
}

void print_gemm_summary() {
  auto& r = gemm_results();
  if (r.empty()) return;
  std::printf("\nmatmul n=%lld (prompt GEMM), AVX2: tokens/s (GFLOP/s); old = vec_dot per token, "
              "new = vec_dot_xn; 1T per second of thread CPU time, 2T per second of wall time\n", static_cast<long long>(kGemmTokens));
  const char* cols[] = {"old 1T", "new 1T", "old 2T", "new 2T"};
  std::printf("%-18s", "weights (rows x K)");
  for (const char* c : cols) std::printf(" %18s", c);
  std::printf(" %8s %8s\n", "x 1T", "x 2T");
  for (auto& [row, m] : r) {
    std::printf("%-18s", row.c_str());
    for (const char* c : cols) {
      char cell[64] = "-";
      if (auto it = m.find(c); it != m.end())
        std::snprintf(cell, sizeof cell, "%.0f (%.1f)", it->second.tok_s, it->second.gflops);
      std::printf(" %18s", cell);
    }
    for (const char* th : {"1T", "2T"}) {
      auto o = m.find(std::string("old ") + th), n = m.find(std::string("new ") + th);
      if (o != m.end() && n != m.end() && o->second.tok_s > 0) std::printf(" %8.2f", n->second.tok_s / o->second.tok_s);
      else std::printf(" %8s", "-");
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
  for (const char* isa : {"scalar", "avx2", "avx512"})
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
  // 4096x2048 projection, 512 tokens.
  const GgmlType gemm_formats[] = {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q5_K,
                                   GgmlType::Q4_0, GgmlType::IQ4_XS, GgmlType::MXFP4};
  const int64_t shapes[][2] = {{768, 2048}, {2048, 768}, {4096, 2048}};
  for (GgmlType t : gemm_formats)
    for (const auto& sh : shapes)
      for (bool xn : {false, true}) {
        const std::string name = std::string("gemm/") + ggml_type_name(t) + "/" + std::to_string(sh[0]) + "x" +
                                 std::to_string(sh[1]) + (xn ? "/new" : "/old");
        benchmark::RegisterBenchmark(name.c_str(), BM_Gemm, t, sh[0], sh[1], xn)
            ->Arg(1)->Arg(2)->ArgName("threads")->MinTime(kMinTime)->UseRealTime();
      }
  benchmark::RegisterBenchmark("dram_read", BM_DramRead)->Arg(1)->Arg(2)->MinTime(kMinTime)->UseRealTime();
  const GgmlType formats[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                              GgmlType::IQ4_XS, GgmlType::MXFP4, GgmlType::F16, GgmlType::BF16};
  for (GgmlType t : formats)
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
      const std::string name = std::string("gemv/") + ggml_type_name(t) + "/" + isa_name(isa);
      benchmark::RegisterBenchmark(name.c_str(), BM_Gemv, isa, t)->Arg(1)->Arg(2)->ArgName("threads")->MinTime(kMinTime)->UseRealTime();
    }
  for (GgmlType t : formats) {
    const std::string name = std::string("gemv_l2hot/") + ggml_type_name(t) + "/avx2";
    benchmark::RegisterBenchmark(name.c_str(), BM_GemvHot, Isa::Avx2, t)->MinTime(0.1)->UseRealTime();
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
