#include "experts/disk_probe.h"

#include <algorithm>
#include <cstdlib>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "experts/io_backend.h"

namespace strata {

int disk_probe_depth(uint64_t ram_budget, int queue_depth, uint64_t req_bytes) {
  const int depth = std::max(1, queue_depth);
  if (ram_budget == 0) return depth;
  return static_cast<int>(std::clamp<uint64_t>(ram_budget / 64 / req_bytes, 4, static_cast<uint64_t>(depth)));
}

namespace {

// Random 4 MiB reads of files[0]; the bytes read and the seconds they took (0 bytes when the buffers
// cannot be allocated).
std::pair<uint64_t, double> probe_files(const std::vector<std::string>& files, uint64_t file_size, bool force_pread, int depth, uint64_t bytes) {
  IoOptions io;
  io.queue_depth = std::max(1, depth);
  io.force_pread = force_pread;
  auto backend = make_io_backend(files, io, nullptr);
  const uint64_t kReq = std::max<uint64_t>(io_align(), std::min<uint64_t>(4ull << 20, align_down(file_size, io_align())));
  const int n_buf = std::max(1, depth);
  void* mem = nullptr;
  if (posix_memalign(&mem, io_align(), kReq * static_cast<uint64_t>(n_buf)) != 0) return {0, 0};
  std::vector<ReadOp> ops(static_cast<size_t>(n_buf));
  std::mt19937_64 rng(7);
  const uint64_t n_req = std::max<uint64_t>(1, bytes / kReq);
  uint64_t submitted = 0, done = 0, got = 0;
  auto submit = [&](ReadOp& op) {
    op = ReadOp{};
    op.file = 0;
    op.offset = align_down(rng() % std::max<uint64_t>(1, file_size - kReq), io_align());
    op.len = static_cast<uint32_t>(kReq);
    op.min_len = 1;
    op.dst = static_cast<uint8_t*>(mem) + (&op - ops.data()) * kReq;
    backend->submit(&op);
    ++submitted;
  };
  const double t0 = clock_s();
  for (auto& op : ops)
    if (submitted < n_req) submit(op);
  ReadOp* out[64];
  while (done < submitted) {
    const int k = backend->reap(out, 64, true);
    for (int i = 0; i < k; ++i) {
      ++done;
      if (out[i]->result > 0) got += static_cast<uint64_t>(out[i]->result);
      if (submitted < n_req) submit(*out[i]);
    }
  }
  const double dt = clock_s() - t0;
  free(mem);
  return {got, dt};
}

double rate(std::pair<uint64_t, double> r) { return r.second > 0 ? static_cast<double>(r.first) / r.second : 0; }

}  // namespace

double measure_read_bandwidth(const ExpertStore& store, bool force_pread, int depth, uint64_t bytes) {
  return rate(probe_files(store.files(), store.file_sizes()[0], force_pread, depth, bytes));
}

DriveProbe measure_drives(const std::vector<std::vector<std::string>>& drives, uint64_t first_size, bool force_pread, int depth, uint64_t bytes) {
  DriveProbe p;
  for (const auto& files : drives) p.drive_bw.push_back(rate(probe_files(files, first_size, force_pread, depth, bytes)));
  if (drives.size() <= 1) {
    p.all_bw = p.drive_bw.empty() ? 0 : p.drive_bw[0];
    return p;
  }
  std::vector<std::pair<uint64_t, double>> got(drives.size());
  std::vector<std::thread> threads;
  const double t0 = clock_s();
  for (size_t i = 0; i < drives.size(); ++i)
    threads.emplace_back([&, i] { got[i] = probe_files(drives[i], first_size, force_pread, depth, bytes); });
  for (auto& t : threads) t.join();
  const double dt = clock_s() - t0;
  uint64_t total = 0;
  for (const auto& g : got) total += g.first;
  p.all_bw = dt > 0 ? static_cast<double>(total) / dt : 0;
  return p;
}

}  // namespace strata
