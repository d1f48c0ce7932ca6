#pragma once
// WarmStats: per-(layer, expert) usage that persists across runs and server restarts, so a new
// run can fill its expert cache with the experts that earlier runs routed to most (warm start).
// One small file per model (keyed by the model's identity) in a cache directory:
//   "STRWARM1" | u32 version | u32 n_layer | u32 n_expert | u32 0 | u64 model key | u64 runs |
//   f64 weight[n_layer * n_expert] | u64 FNV-1a of every byte before it
// Saving merges with the file on disk (older weights decayed), writes a temporary file, fsyncs it
// and renames it over the old one, so readers and concurrent writers never see a partial file.
// Loading never throws: a missing, truncated, corrupt, foreign-model or wrong-version file is
// reported in `why` and ignored.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "experts/cache_policy.h"

namespace strata {

class GgufModel;

inline constexpr uint32_t kWarmStatsVersion = 1;
// Weight of what earlier runs recorded when a run's counts are added (per save).
inline constexpr double kWarmStatsDecay = 0.5;

struct WarmStats {
  uint64_t model_key = 0;
  int n_layer = 0, n_expert = 0;
  uint64_t runs = 0;
  std::vector<double> weight;  // [n_layer * n_expert], decayed routing counts

  // Experts with weight > 0, heaviest first (ties: lower layer, then lower expert).
  std::vector<ExpertKey> ranked() const;
};

// The model's identity: a hash of its metadata count, tensor table (names, types, shapes,
// offsets) and file sizes. Another file with the same layout gets the same key.
uint64_t model_identity(const GgufModel& model);
// $XDG_CACHE_HOME/strata, else $HOME/.cache/strata, else "" (no place to keep statistics).
std::string default_stats_dir();
std::string warm_stats_path(const std::string& dir, uint64_t model_key);

std::vector<uint8_t> serialize_warm_stats(const WarmStats& s);
// Checks every field against the expected model key and shape; nullopt with `why` set otherwise.
std::optional<WarmStats> parse_warm_stats(std::span<const uint8_t> bytes, uint64_t model_key, int n_layer, int n_expert,
                                          std::string* why);
// nullopt with `why` empty when the file does not exist.
std::optional<WarmStats> load_warm_stats(const std::string& path, uint64_t model_key, int n_layer, int n_expert, std::string* why);
// Adds `counts` (this run's routings, [n_layer * n_expert]) to the file's weights decayed by
// kWarmStatsDecay (a file that does not load counts as empty) and replaces the file atomically.
// Creates the directory. Concurrent writers take turns (flock on the directory). Throws
// strata::Error on I/O errors.
void save_warm_stats(const std::string& path, uint64_t model_key, int n_layer, int n_expert, std::span<const double> counts);

}  // namespace strata
