#pragma once
// The disk's read bandwidth as the expert tier sees it: random 4 MiB reads of the model's expert
// region through the tier's I/O backend (io_uring + O_DIRECT, or the pread pool). `strata bench`
// and `strata serve` (/stats) compare the tier's reads against it (the physical limit).
#include <cstdint>
#include <string>
#include <vector>

#include "experts/expert_store.h"

namespace strata {

// Reads in flight for the probe. Under a RAM budget the probe's buffers must fit beside the full
// plan (e.g. in a memory cgroup sized to the budget): at most 1/64 of the budget in flight, which
// still reaches the disk's deep-queue bandwidth at the budgets of interest (64 requests of 4 MiB
// from a 16 GiB budget up). ram_budget 0: no budget (queue_depth).
int disk_probe_depth(uint64_t ram_budget, int queue_depth, uint64_t req_bytes = 4ull << 20);

// Reads `bytes` of the first model file in 4 MiB requests, `depth` in flight; bytes per second
// (0 when the buffers cannot be allocated).
double measure_read_bandwidth(const ExpertStore& store, bool force_pread, int depth, uint64_t bytes);

// Several drives (--model-copy): drives[i] are one drive's files as make_io_backend takes them (the
// model's parts, then each copy's), the first of size first_size. Each drive is read alone, then all
// at once (a thread per drive, `bytes` each) as the tier reads them: that figure is the limit.
struct DriveProbe {
  std::vector<double> drive_bw;  // [drives] each alone, bytes per second
  double all_bw = 0;             // all at once: the bytes of every drive over the wall time (one drive: its own)
};
DriveProbe measure_drives(const std::vector<std::vector<std::string>>& drives, uint64_t first_size, bool force_pread, int depth, uint64_t bytes);

}  // namespace strata
