// strata calibrate -m MODEL -f TEXT [--ram-budget B] [-c N] [--chunks N] [--settings LIST] [--out PATH] [--json]
//
// Prices issue 37's lossy routing knobs on a text: the model with the knobs off is run once over
// perplexity's windows (runtime/perplexity.h score_windows) and its logits kept; then each knob
// setting, "off" included (bit-identical logits: KL exactly 0), (runtime/calibration.h kCalibrationGrid, or --settings) is run from a fresh
// engine (a cold expert cache under --ram-budget, no warm start) over the same tokens, teacher
// forced, measuring the mean and p99 KL divergence from the base, top-1 agreement and the expert
// bytes read per evaluated token (with --miss-model FILE, the settings that compute misses from that
// stand-in count its experts' bytes too). Prints a table and writes the calibration file beside the
// warm-start statistics (or --out), which --quality-budget reads.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "core/error.h"
#include "core/units.h"
#include "experts/warm_stats.h"
#include "runtime/calibration.h"
#include "runtime/perplexity.h"

namespace strata::cli {
namespace {

// The base's logits are kept in memory: at most this many bytes (-c / --chunks cut it).
constexpr uint64_t kMaxBaseLogprobBytes = uint64_t{4} << 30;

struct CalibOptions {
  ModelOptions model;
  std::string file, settings, out;
  int chunks = 0;
  bool json = false;
};

// One setting's figures over the windows against `base` (the knobs-off logits of every scored
// position, in order); with `record` (the base run) the logits are recorded into it instead.
struct SettingRun {
  KlSummary kl;
  double bytes_per_token = 0, standin_bytes_per_token = 0;
};

SettingRun run_setting(const CalibOptions& o, const KnobSetting& s, const std::vector<int32_t>& tokens, const PplWindows& w,
                       std::vector<float>& base, bool record) {
  ModelOptions mo = o.model;
  mo.moe_k = s.moe_k;
  mo.moe_min_mass = s.moe_min_mass;
  mo.route_cache = s.route_cache;
  if (!s.miss_model) mo.miss_model.clear();
  Loaded l = load_engine(mo);
  Engine& eng = *l.engine;
  const int nv = eng.config().n_vocab;
  KlStats kls;
  size_t at = 0;
  score_windows(eng, tokens, w, -1, [&](const float* row, int32_t target) {
    if (record) {
      base.insert(base.end(), row, row + nv);
      return;
    }
    const float* ref = base.data() + at;
    kls.add(token_nll(row, nv, target), token_nll(ref, nv, target), kl_divergence_logits(ref, row, nv));
    at += static_cast<size_t>(nv);
  });
  SettingRun r;
  if (!record) r.kl = kls.summary();
  const uint64_t evaluated = static_cast<uint64_t>(w.n_chunk) * static_cast<uint64_t>(w.n_ctx);
  const uint64_t standin = l.standin_experts ? l.standin_experts->counters().bytes.load() : 0;
  r.standin_bytes_per_token = static_cast<double>(standin) / static_cast<double>(evaluated);
  r.bytes_per_token = static_cast<double>(eng.tier().counters().bytes_read + standin) / static_cast<double>(evaluated);
  return r;
}

std::string table(const Calibration& c) {
  std::string s = fmt::format("{:<40} {:>10} {:>9} {:>8} {:>16}\n", "setting", "mean KL", "p99 KL", "top-1", "expert bytes/tok");
  for (const CalibratedSetting& x : c.settings)
    s += fmt::format("{:<40} {:>10.6f} {:>9.5f} {:>7.2f}% {:>16}\n", x.knobs.options(), x.mean_kl, x.p99_kl, 100.0 * x.top1,
                     format_bytes(static_cast<uint64_t>(x.bytes_per_token)));
  return s;
}

int run(CalibOptions& o) {
  const ModelOptions& m = o.model;
  STRATA_CHECK(m.moe_k == 0 && m.moe_min_mass == 1.0f && m.route_cache.empty() && m.quality_budget < 0 && !m.miss_admit && m.pp_model.empty(),
               "strata calibrate sets the knobs itself: give them in --settings, not as --moe-k / --moe-min-mass / --route-cache / "
               "--quality-budget (--miss-model FILE names the stand-in of the miss-model settings; --miss-admit and --pp-model are not calibrated)");
  STRATA_CHECK(!m.expert_parallel, "strata calibrate: not with --expert-parallel");
  o.model.no_warm_start = true;  // every setting from a cold cache; the statistics are left as they are
  o.model.logit_rows = o.model.n_batch;

  // The model's shape, key and tokens from a first load (the base run loads its own engine).
  std::vector<int32_t> tokens;
  int k = 0, n_expert = 0, nv = 0, n_ctx = 0;
  uint64_t key = 0, standin_key = 0;
  int32_t bos = -1;
  {
    Loaded l = load_engine(o.model);  // with --miss-model, the stand-in is checked against the model here
    if (l.standin) standin_key = model_identity(l.standin->gguf());
    for (const LayerConfig& lc : l.engine->config().layers) k = std::max(k, lc.n_expert_used), n_expert = std::max(n_expert, lc.n_expert);
    STRATA_CHECK(k > 0, "strata calibrate: {} has no routed experts (nothing to calibrate)", m.path);
    key = model_identity(l.engine->model().gguf());
    nv = l.engine->config().n_vocab;
    n_ctx = l.engine->options().n_ctx;
    tokens = l.tokenizer->encode(read_file_bytes(o.file), true, false);
    bos = l.tokenizer->add_bos() ? l.tokenizer->bos() : -1;
  }
  const PplWindows w = ppl_windows(static_cast<int64_t>(tokens.size()), n_ctx, o.chunks);
  STRATA_CHECK(w.n_chunk >= 1, "{}: {} tokens: need at least one window of -c {} tokens", o.file, tokens.size(), n_ctx);
  // Every window starts with BOS when the vocabulary adds one, as strata perplexity does.
  std::vector<int32_t> evaluated(tokens.begin(), tokens.begin() + static_cast<int64_t>(w.n_chunk) * n_ctx);
  if (bos >= 0)
    for (int c = 0; c < w.n_chunk; ++c) evaluated[static_cast<size_t>(c) * static_cast<size_t>(n_ctx)] = bos;
  const uint64_t scored = static_cast<uint64_t>(w.n_chunk) * static_cast<uint64_t>(w.scored_per_chunk());
  STRATA_CHECK(scored > 0, "strata calibrate: -c {} scores no position (give at least -c 4)", n_ctx);
  STRATA_CHECK(scored * static_cast<uint64_t>(nv) * 4 <= kMaxBaseLogprobBytes,
               "strata calibrate: {} scored positions x {} vocabulary entries of base logits pass {}: lower -c or --chunks", scored, nv,
               format_bytes(kMaxBaseLogprobBytes));
  const bool standin = !m.miss_model.empty();
  const std::vector<KnobSetting> grid = o.settings.empty() ? default_knob_grid(k, n_expert, standin) : parse_knob_settings(o.settings, k, n_expert);
  for (const KnobSetting& s : grid)
    STRATA_CHECK(!s.miss_model || standin, "strata calibrate: setting '{}' needs the stand-in file: give --miss-model FILE", s.name());

  Calibration cal;
  cal.model_key = key;
  cal.ram_budget = m.ram_budget.empty() ? 0 : parse_bytes(m.ram_budget);
  cal.text_hash = tokens_hash(evaluated);
  cal.scored_tokens = static_cast<int64_t>(scored);
  cal.n_ctx = n_ctx;
  cal.n_batch = o.model.n_batch;
  if (standin) {
    cal.miss_model = std::filesystem::absolute(m.miss_model).string();
    cal.miss_model_key = standin_key;
  }
  std::vector<float> base;
  base.reserve(scored * static_cast<size_t>(nv));
  const double t0 = now_s();
  run_setting(o, KnobSetting{}, evaluated, w, base, /*record=*/true);  // the reference; "off" is then measured against it like the rest
  for (size_t i = 0; i < grid.size(); ++i) {
    const SettingRun r = run_setting(o, grid[i], evaluated, w, base, false);
    cal.settings.push_back({grid[i], r.kl.mean, r.kl.p99, r.kl.top1, r.bytes_per_token, r.standin_bytes_per_token});
    if (!o.json)
      std::fprintf(stderr, "calibrate: [%zu/%zu] %s: mean KL %.6f, %s per token (%.1f s)\n", i + 1, grid.size(), grid[i].options().c_str(), r.kl.mean,
                   format_bytes(static_cast<uint64_t>(r.bytes_per_token)).c_str(), now_s() - t0);
  }

  std::string path = o.out;
  if (path.empty()) {
    const std::string dir = m.stats_dir.empty() ? default_stats_dir() : m.stats_dir;
    STRATA_CHECK(!dir.empty(), "strata calibrate: no statistics directory ($XDG_CACHE_HOME and $HOME unset): give --out FILE or --stats-dir DIR");
    path = calibration_path(dir, key);
  }
  save_calibration(path, cal);
  if (o.json) {
    nlohmann::json j = nlohmann::json::parse(serialize_calibration(cal));
    j["path"] = path;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s", table(cal).c_str());
    std::printf("calibration: %d windows of %d tokens, %lld scored, %s; written to %s\n", w.n_chunk, n_ctx, static_cast<long long>(scored),
                cal.ram_budget ? ("--ram-budget " + format_bytes(cal.ram_budget)).c_str() : "no --ram-budget", path.c_str());
  }
  return 0;
}

}  // namespace

Command add_calibrate(CLI::App& app) {
  auto o = std::make_shared<CalibOptions>();
  o->model.n_batch = 1;  // token by token: each token routes against the cache a decode step sees
  o->model.n_ctx = 256;
  auto* sub = app.add_subcommand("calibrate",
                                 "Measure each lossy routing knob setting's KL divergence from the knobs-off logits and its expert bytes read "
                                 "per token on a text; writes the calibration file --quality-budget reads");
  add_model_options(sub, o->model);
  sub->add_option("-f,--file", o->file, "Text to calibrate on (perplexity's windows of -c tokens)")->required();
  sub->add_option("--chunks", o->chunks, "Use at most this many windows (0: all)")->check(CLI::Range(0, 1 << 20));
  sub->add_option("--settings", o->settings,
                  "Settings to measure, ';'-separated, each 'off' or knobs joined by '+': route-cache=J,M (J, M may be k, k-N, Nk), "
                  "moe-min-mass=P, moe-k=K, miss-model (the stand-in --miss-model FILE names) (default: a grid of route-cache, moe-min-mass "
                  "and both, and with --miss-model FILE the stand-in alone and with route-cache)");
  sub->add_option("--out", o->out, "Write the calibration file here (default: beside the warm-start statistics, where --quality-budget looks)");
  sub->add_flag("--json", o->json, "Print the calibration as one JSON line (with its path)");
  return {sub, [o] { return run(*o); }};
}

}  // namespace strata::cli
