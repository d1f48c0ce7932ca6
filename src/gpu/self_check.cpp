#include "gpu/self_check.h"

#include <chrono>
#include <cmath>
#include <random>

#include "core/error.h"
#include "gpu/ops.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/quants.h"

namespace strata::gpu {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

std::vector<float> randf(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

double nmse(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den == 0 ? num : num / den;
}

std::vector<CheckResult> self_check(Device& dev, int64_t rows, int64_t cols, int n_tok) {
  Ops ops(dev);
  std::vector<CheckResult> out;
  for (GgmlType t : matvec_types()) {
    const int64_t blk = ggml_info(t).block_size;
    const int64_t c = std::max<int64_t>(blk, cols / 256 * 256);
    const uint64_t rb = ggml_row_size(t, static_cast<uint64_t>(c));
    std::vector<uint8_t> w(static_cast<size_t>(rows * rb));
    for (int64_t r = 0; r < rows; ++r) {
      const auto f = randf(c, static_cast<uint32_t>(r + 1));
      quantize_row(t, f.data(), w.data() + r * rb, c);
    }
    const QMatrix q{t, rows, c, w.data(), rb};
    const auto x = randf(n_tok * c, 1234);
    std::vector<float> exact(static_cast<size_t>(n_tok * rows)), cpu(exact.size()), got(exact.size()), deq(static_cast<size_t>(c));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(t, q.row(r), deq.data(), c);
      for (int tk = 0; tk < n_tok; ++tk) {
        double s = 0;
        for (int64_t i = 0; i < c; ++i) s += static_cast<double>(deq[i]) * x[tk * c + i];
        exact[tk * rows + r] = static_cast<float>(s);
      }
    }
    MatmulScratch ms;
    matmul(kernels(), nullptr, q, x.data(), n_tok, cpu.data(), ms);
    const DeviceMatrix m = upload_matrix(dev, q, fmt::format("check.{}", ggml_type_name(t)));
    Buffer xb = upload_f32(dev, x.data(), n_tok * c, "check.x");
    Buffer yb = upload_f32(dev, nullptr, n_tok * rows, "check.y");
    ops.matvec(m, xb, n_tok, yb);
    dev.submit();  // warm-up: pipeline built, caches touched
    const auto t0 = Clock::now();
    ops.matvec(m, xb, n_tok, yb);
    dev.submit();
    CheckResult r;
    r.gpu_ms = ms_since(t0);
    download_f32(dev, yb, got.data(), n_tok * rows);
    r.op = fmt::format("matvec {} {}x{} x{}", ggml_type_name(t), rows, c, n_tok);
    r.nmse_exact = nmse(got, exact);
    r.nmse_cpu = nmse(got, cpu);
    r.threshold = 5e-4;
    r.ok = r.nmse_exact < 1e-10 && r.nmse_cpu < r.threshold;
    out.push_back(r);
  }
  // The row ops on `cols` values x n_tok rows.
  const int64_t n = cols;
  const auto x = randf(n_tok * n, 77);
  const auto g = randf(n_tok * n, 78);
  auto run_rowop = [&](const std::string& name, auto cpu_fn, auto gpu_fn) {
    std::vector<float> want = x, got(x.size());
    cpu_fn(want);
    Buffer b = upload_f32(dev, x.data(), static_cast<int64_t>(x.size()), "check.x");
    Buffer o = upload_f32(dev, nullptr, static_cast<int64_t>(x.size()), "check.out");
    gpu_fn(b, o);
    dev.submit();
    const Buffer& res = name.starts_with("softmax") || name.starts_with("rope") ? b : o;
    download_f32(dev, res, got.data(), static_cast<int64_t>(got.size()));
    CheckResult r;
    r.op = name;
    r.nmse_exact = r.nmse_cpu = nmse(got, want);
    r.threshold = 1e-10;
    r.ok = r.nmse_cpu < r.threshold;
    out.push_back(r);
  };
  run_rowop(
      fmt::format("rmsnorm {}x{}", n_tok, n),
      [&](std::vector<float>& v) {
        for (int tk = 0; tk < n_tok; ++tk) rmsnorm(x.data() + tk * n, nullptr, v.data() + tk * n, n, 1e-6f);
      },
      [&](Buffer& b, Buffer& o) { ops.rmsnorm(b, nullptr, o, n, n_tok, 1e-6f); });
  run_rowop(
      fmt::format("softmax {}x{}", n_tok, n), [&](std::vector<float>& v) {
        for (int tk = 0; tk < n_tok; ++tk) softmax(v.data() + tk * n, n, 0.125f);
      },
      [&](Buffer& b, Buffer&) { ops.softmax(b, n, n_tok, 0.125f); });
  run_rowop(
      fmt::format("swiglu {}", n_tok * n), [&](std::vector<float>& v) { swiglu(x.data(), g.data(), v.data(), n_tok * n); },
      [&](Buffer& b, Buffer& o) {
        Buffer gb = upload_f32(dev, g.data(), n_tok * n, "check.up");
        ops.swiglu(b, gb, o, n_tok * n);
        dev.submit();
      });
  if (n % 128 == 0) {
    RopeParams p;
    p.n_dims = 128;
    p.neox = true;
    p.freq_base = 1e6f;
    std::vector<float> cs(static_cast<size_t>(n_tok * 128));
    for (int tk = 0; tk < n_tok; ++tk) rope_cache(p, static_cast<float>(tk * 17), cs.data() + tk * 128);
    run_rowop(
        fmt::format("rope neox {}x{}", n_tok, n),
        [&](std::vector<float>& v) {
          for (int tk = 0; tk < n_tok; ++tk)
            for (int64_t h = 0; h < n / 128; ++h) rope_apply(p, cs.data() + tk * 128, v.data() + tk * n + h * 128);
        },
        [&](Buffer& b, Buffer&) {
          Buffer cb = upload_f32(dev, cs.data(), static_cast<int64_t>(cs.size()), "check.rope");
          ops.rope(b, cb, 128, static_cast<int>(n / 128), 128, true, n_tok);
          dev.submit();
        });
  }
  return out;
}

TransferRates transfer_rates(Device& dev, uint64_t bytes) {
  TransferRates r;
  r.bytes = bytes;
  std::vector<uint8_t> host(bytes, 0x5A), back(bytes);
  Buffer b = dev.alloc(bytes, "check.transfer");
  dev.upload(b, 0, host.data(), bytes);  // warm-up
  auto t0 = Clock::now();
  dev.upload(b, 0, host.data(), bytes);
  r.upload_gbs = static_cast<double>(bytes) / (ms_since(t0) * 1e6);
  t0 = Clock::now();
  dev.download(b, 0, back.data(), bytes);
  r.download_gbs = static_cast<double>(bytes) / (ms_since(t0) * 1e6);
  STRATA_CHECK(back == host, "GPU check: {} bytes read back differ from those uploaded", bytes);
  return r;
}

}  // namespace strata::gpu
