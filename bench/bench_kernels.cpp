// Kernel lab benchmark: DRAM read bandwidth, then matmul n=1 (gemv) per weight format, thread
// count and kernel table over a weight matrix much larger than L3, reported as weight bytes
// streamed per second and as a fraction of the measured DRAM read bandwidth.
// Plain run (`bench_kernels`) runs everything briefly and prints a summary table at the end;
// Google Benchmark flags (--benchmark_filter=..., --benchmark_min_time=...) work as usual.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>
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
  bool ok = false;
};
std::map<std::string, std::map<std::string, Result>>& results() {
  static std::map<std::string, std::map<std::string, Result>> r;
  return r;
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
  results()["DRAM read (sum)"][std::to_string(threads) + "T"] = {gbps, true};
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

double measure_dram(int threads) {
  auto& d = dram_gbps();
  if (!d.count(threads)) {  // filtered out: measure quickly now
    const auto& buf = dram_buffer();
    float partial[64] = {};
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 4; ++i)
      pool(threads).parallel_for(static_cast<int64_t>(buf.size()), 1 << 16, [&](int64_t b, int64_t e, int tid) {
        partial[tid] += sum_range(buf.data() + b, e - b);
      });
    benchmark::DoNotOptimize(partial);
    d[threads] = 4 * double(kWeightBytes) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9;
  }
  return d[threads];
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
  const double dram = measure_dram(threads);
  const Weights& w = weights(t);
  std::vector<float> x(kCols), y(w.m.rows);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : x) v = nd(rng);
  MatmulScratch s;
  ThreadPool& tp = pool(threads);
  matmul(*k, &tp, w.m, x.data(), 1, y.data(), s);  // warm-up (page faults, scratch)
  double secs = 0;
  int64_t iters = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    matmul(*k, &tp, w.m, x.data(), 1, y.data(), s);
    secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++iters;
    benchmark::DoNotOptimize(y.data());
  }
  const double bytes = double(w.m.rows) * double(w.m.row_stride_bytes);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
  const double gbps = iters * bytes / secs / 1e9;
  state.counters["dram_ratio"] = gbps / dram;
  state.counters["dram_GBps"] = dram;
  results()[row][col] = {gbps, true};
}

void print_summary() {
  auto& r = results();
  if (r.empty()) return;
  std::vector<std::string> cols;
  for (auto& [_, m] : r)
    for (auto& [c, __] : m)
      if (std::find(cols.begin(), cols.end(), c) == cols.end()) cols.push_back(c);
  std::sort(cols.begin(), cols.end());
  std::printf("\nSummary: GB/s of weights streamed by matmul n=1 (%zu MiB of weights, %lld columns); "
              "(x.xx) = fraction of DRAM read bandwidth at the same thread count\n",
              kWeightBytes >> 20, static_cast<long long>(kCols));
  std::printf("%-16s", "format");
  for (auto& c : cols) std::printf(" %16s", c.c_str());
  std::printf("\n");
  for (auto& [row, m] : r) {
    std::printf("%-16s", row.c_str());
    for (auto& c : cols) {
      auto it = m.find(c);
      if (it == m.end() || !it->second.ok) {
        std::printf(" %16s", "-");
        continue;
      }
      const int threads = c.back() == 'T' ? std::atoi(c.substr(c.rfind(' ') + 1).c_str()) : 0;
      const int th = threads ? threads : std::atoi(c.c_str());
      char cell[64];
      const auto d = dram_gbps().find(th);
      if (row.rfind("DRAM", 0) != 0 && d != dram_gbps().end())
        std::snprintf(cell, sizeof cell, "%.2f (%.2f)", it->second.gbps, it->second.gbps / d->second);
      else
        std::snprintf(cell, sizeof cell, "%.2f", it->second.gbps);
      std::printf(" %16s", cell);
    }
    std::printf("\n");
  }
}

void register_all() {
  benchmark::RegisterBenchmark("dram_read", BM_DramRead)->Arg(1)->Arg(2)->MinTime(kMinTime)->UseRealTime();
  const GgmlType formats[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                              GgmlType::IQ4_XS, GgmlType::MXFP4, GgmlType::F16, GgmlType::BF16};
  for (GgmlType t : formats)
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
      const std::string name = std::string("gemv/") + ggml_type_name(t) + "/" + isa_name(isa);
      benchmark::RegisterBenchmark(name.c_str(), BM_Gemv, isa, t)->Arg(1)->Arg(2)->ArgName("threads")->MinTime(kMinTime)->UseRealTime();
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
  return 0;
}
