// Opt-in prompt-size products through OpenBLAS (see matmul.h, GemmBackend::Blas): weight tiles
// dequantized into a per-thread f32 buffer, then one cblas_sgemm per tile against the f32
// activations. Our pool hands tiles to its threads; OpenBLAS runs single-threaded inside each
// (measured faster than OpenBLAS's own threads over tiles dequantized by one thread).
#include <algorithm>
#include <atomic>
#include <string>

#include "core/error.h"
#include "kernels/matmul.h"

#ifdef STRATA_HAVE_OPENBLAS
#include <cblas.h>
#include <dlfcn.h>
#endif

namespace strata {

namespace {

std::atomic<GemmBackend> g_backend{GemmBackend::Int8};

// Rows per dequantized tile (swept 32..256 in bench_kernels: 128 was best at K = 768 / 2048);
// smaller for short matrices so that every thread gets >= 2 tiles.
constexpr int64_t kTileRows = 128;
constexpr int64_t kMinTileRows = 16;

#ifdef STRATA_HAVE_OPENBLAS
// OpenBLAS is loaded on first use (STRATA_OPENBLAS_LIB: the library the build found), not linked:
// Debian's build starts a worker thread as it loads, which then yields in a loop for about 2^28
// cycles (0.1 s here) in every process, and only --gemm blas uses it, single-threaded.
struct Blas {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&openblas_set_num_threads) set_threads = nullptr;
};

const Blas& blas() {
  static const Blas b = [] {
    Blas r;
    void* h = ::dlopen(STRATA_OPENBLAS_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!h) return r;
    r.sgemm = reinterpret_cast<decltype(&cblas_sgemm)>(::dlsym(h, "cblas_sgemm"));
    r.set_threads = reinterpret_cast<decltype(&openblas_set_num_threads)>(::dlsym(h, "openblas_set_num_threads"));
    if (!r.sgemm || !r.set_threads) r = Blas{};
    return r;
  }();
  return b;
}
#endif

}  // namespace

bool gemm_blas_built() {
#ifdef STRATA_HAVE_OPENBLAS
  return true;
#else
  return false;
#endif
}

bool gemm_blas_available() {
#ifdef STRATA_HAVE_OPENBLAS
  return blas().sgemm != nullptr;
#else
  return false;
#endif
}

void select_gemm_backend(GemmBackend b) {
  STRATA_CHECK(b != GemmBackend::Blas || gemm_blas_available(), "--gemm blas: this build has no OpenBLAS");
#ifdef STRATA_HAVE_OPENBLAS
  // matmul_blas calls sgemm from every pool thread: OpenBLAS itself stays single-threaded.
  if (b == GemmBackend::Blas) blas().set_threads(1);
#endif
  g_backend.store(b, std::memory_order_relaxed);
}

GemmBackend gemm_backend() { return g_backend.load(std::memory_order_relaxed); }

GemmBackend parse_gemm_backend(const char* name) {
  const std::string s(name);
  if (s == "int8") return GemmBackend::Int8;
  if (s == "blas") return GemmBackend::Blas;
  fail("unknown gemm backend '{}' (int8, blas)", s);
}

bool matmul_blas_applies(const KernelTable& k, const QMatrix& w, int64_t n) {
  return gemm_backend() == GemmBackend::Blas && n >= kBlasMinTokens && w.type != GgmlType::F32 &&
         k.dequantize[static_cast<uint32_t>(w.type)] != nullptr;
}

void matmul_blas(const KernelTable& k, ThreadPool* pool, const QMatrix& w, const float* x, int64_t n, float* y,
                 MatmulScratch& s) {
#ifdef STRATA_HAVE_OPENBLAS
  if (n <= 0 || w.rows <= 0) return;
  const auto sgemm = blas().sgemm;
  STRATA_CHECK(sgemm != nullptr, "matmul_blas: OpenBLAS ({}) could not be loaded", STRATA_OPENBLAS_LIB);
  const ToFloatFn deq = k.dequantize[static_cast<uint32_t>(w.type)];
  STRATA_CHECK(deq != nullptr, "kernel table '{}' has no dequantize for {}", k.name, ggml_type_name(w.type));
  STRATA_CHECK(w.cols % ggml_info(w.type).block_size == 0, "matmul: {} columns is not a multiple of the {} block size",
               w.cols, ggml_type_name(w.type));
  const int nt = pool ? pool->size() : 1;
  const int64_t tile = std::clamp<int64_t>((w.rows + 2 * nt - 1) / (2 * nt), kMinTileRows, kTileRows);
  const size_t per_thread = static_cast<size_t>(tile * w.cols);
  if (s.tile.size() < per_thread * nt) s.tile.resize(per_thread * nt);
  const int64_t n_tiles = (w.rows + tile - 1) / tile;
  const int ld = static_cast<int>(w.cols);
  auto do_tile = [&](int64_t i, int tid) {
    const int64_t r0 = i * tile, nr = std::min(tile, w.rows - r0);
    float* b = s.tile.data() + per_thread * tid;  // [nr, cols]
    for (int64_t r = 0; r < nr; ++r) deq(w.row(r0 + r), b + r * w.cols, w.cols);
    // y[:, r0 .. r0 + nr) = x [n, cols] * b^T
    sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(nr), ld, 1.0f, x, ld,
                b, ld, 0.0f, y + r0, static_cast<int>(w.rows));
  };
  if (nt == 1) {
    for (int64_t i = 0; i < n_tiles; ++i) do_tile(i, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  pool->run([&](int tid) {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n_tiles;) do_tile(i, tid);
  });
#else
  fail("matmul_blas: this build has no OpenBLAS");
#endif
}

}  // namespace strata
