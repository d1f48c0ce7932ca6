// strata bench: llama-bench-like figures (pp and tg tokens/s) plus the expert tier's numbers:
// hit rate, bytes read per token, achieved read bandwidth, and the fraction of the physical
// limit (time the I/O alone needs at the measured disk bandwidth / time per token).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <random>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/units.h"
#include "experts/disk_probe.h"
#include "model/model_summary.h"

namespace strata::cli {
namespace {

struct BenchOptions {
  ModelOptions model;
  int n_prompt = 512;
  int n_gen = 128;
  bool json = false;
  uint64_t disk_probe = 1ull << 30;  // bytes read to measure the disk
  // tg input: random token ids (llama-bench's tg; varied routing, as real text gives) or the
  // greedy continuation (on random-weight models it tends to repeat a few tokens, whose experts
  // then always hit the cache: flattering figures).
  std::string tg_input = "random";
};

int probe_depth(const ModelOptions& mo) { return disk_probe_depth(mo.ram_budget.empty() ? 0 : parse_bytes(mo.ram_budget), mo.queue_depth); }

struct Phase {
  const char* name;
  int tokens;
  double seconds;
  ExpertCacheCounters delta;
};

ExpertCacheCounters diff(const ExpertCacheCounters& a, const ExpertCacheCounters& b) {
  ExpertCacheCounters d;
  d.hits = a.hits - b.hits;
  d.misses = a.misses - b.misses;
  d.bytes_read = a.bytes_read - b.bytes_read;
  d.wait_s = a.wait_s - b.wait_s;
  return d;
}

// The weight types of the routed experts and of the dense part, and the routed bytes a token
// reads when no expert is cached (what the expert tier saves on).
void print_weight_mix(const ModelSummary& s, nlohmann::json& j) {
  std::string routed, dense;
  for (const auto& [name, tu] : s.types) {
    if (tu.routed_bytes) routed += fmt::format("{}{} {}", routed.empty() ? "" : ", ", name, format_bytes(tu.routed_bytes));
    if (tu.bytes > tu.routed_bytes) dense += fmt::format("{}{} {}", dense.empty() ? "" : ", ", name, format_bytes(tu.bytes - tu.routed_bytes));
  }
  fmt::print("weights: routed experts [{}]; dense [{}]; routed bytes per token uncached {}\n", routed, dense, format_bytes(s.touched_routed));
  j["routed_bytes_per_token_uncached"] = s.touched_routed;
}

int bench(const BenchOptions& o) {
  auto loaded = load_engine(o.model);
  Engine& eng = *loaded.engine;
  const int nv = eng.config().n_vocab;
  STRATA_CHECK(o.n_prompt + o.n_gen <= eng.options().n_ctx, "pp {} + tg {} exceed the context {} (use -c)", o.n_prompt, o.n_gen, eng.options().n_ctx);
  std::mt19937 rng(1234);
  std::vector<int32_t> prompt(static_cast<size_t>(o.n_prompt));
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(std::min(nv, 1000)) + std::min(nv - 1, 100)) % nv;
  std::vector<float> logits;
  std::vector<Phase> phases;
  ExpertCacheCounters c0 = eng.tier().counters();
  if (o.n_prompt > 0) {
    const double t0 = clock_s();
    eng.eval(0, prompt.data(), o.n_prompt, 0, false, logits);
    const double dt = clock_s() - t0;
    ExpertCacheCounters c1 = eng.tier().counters();
    phases.push_back({"pp", o.n_prompt, dt, diff(c1, c0)});
    c0 = c1;
  }
  if (o.n_gen > 0) {
    const bool greedy = o.tg_input == "greedy";
    int pos = o.n_prompt;
    int32_t t = prompt.empty() ? 1 : prompt.back();
    const double t0 = clock_s();
    for (int s = 0; s < o.n_gen; ++s) {
      eng.eval(0, &t, 1, pos++, false, logits);
      t = greedy ? Sampler::argmax(logits.data(), nv) : static_cast<int32_t>(rng() % static_cast<uint32_t>(nv));
    }
    const double dt = clock_s() - t0;
    ExpertCacheCounters c1 = eng.tier().counters();
    phases.push_back({"tg", o.n_gen, dt, diff(c1, c0)});
  }
  // The cache as it is now (a background load that ended during the run dropped it).
  ExpertCache* cache = eng.tier().cache();
  const double disk = cache && o.disk_probe > 0 ? measure_read_bandwidth(eng.tier().store(), o.model.io == "pread", probe_depth(o.model), o.disk_probe) : 0;
  nlohmann::json j;
  j["model"] = o.model.path;
  j["threads"] = eng.options().n_threads;
  j["tg_input"] = o.tg_input;
  j["plan"] = eng.tier().plan().describe();
  j["peak_rss"] = process_peak_rss();
  j["disk_bw"] = disk;
  fmt::print("{}\n", eng.tier().plan().describe());
  print_weight_mix(ModelSummary::of(eng.model().gguf()), j);
  fmt::print("| test  | tokens/s | hit rate | read/token | read GB/s | I/O wait | limit fraction |\n");
  fmt::print("|-------|----------|----------|------------|-----------|----------|----------------|\n");
  for (const auto& p : phases) {
    const double tps = p.tokens / p.seconds;
    const double acc = static_cast<double>(p.delta.hits + p.delta.misses);
    const double per_tok = static_cast<double>(p.delta.bytes_read) / p.tokens;
    const double io_time = disk > 0 ? static_cast<double>(p.delta.bytes_read) / disk : 0;
    const double frac = io_time > 0 ? io_time / p.seconds : 0;
    const std::string name = fmt::format("{}{}", p.name, p.tokens);
    fmt::print("| {:<5} | {:>8.2f} | {:>7.1f}% | {:>10} | {:>9.2f} | {:>7.0f}% | {:>13.0f}% |\n", name, tps, acc > 0 ? 100.0 * p.delta.hits / acc : 100.0,
               format_bytes(static_cast<uint64_t>(per_tok)), static_cast<double>(p.delta.bytes_read) / p.seconds / 1e9, 100.0 * p.delta.wait_s / p.seconds,
               100.0 * frac);
    j[name] = {{"tokens_per_s", tps}, {"hit_rate", acc > 0 ? p.delta.hits / acc : 1.0}, {"bytes_per_token", per_tok},
               {"read_bw", static_cast<double>(p.delta.bytes_read) / p.seconds}, {"io_wait_s", p.delta.wait_s}, {"limit_fraction", frac}};
  }
  if (disk > 0)
    fmt::print("disk (measured, {} random 4 MiB reads at queue depth {}): {:.2f} GB/s; peak RSS {}\n", format_bytes(o.disk_probe), probe_depth(o.model),
               disk / 1e9, format_bytes(process_peak_rss()));
  else
    fmt::print("disk: not measured ({}); peak RSS {}\n", cache ? "--disk-probe 0" : "experts resident", format_bytes(process_peak_rss()));
  if (eng.tier().plan().warm_s > 0) fmt::print("load: {:.1f} s reading the model into the page cache\n", eng.tier().plan().warm_s);
  j["warm_s"] = eng.tier().plan().warm_s;
  if (o.json) fmt::print("{}\n", j.dump());
  return 0;
}

}  // namespace

Command add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  auto* sub = app.add_subcommand("bench", "Prompt processing and generation speed, with the expert tier's figures");
  add_model_options(sub, o->model);
  sub->add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens (pp)");
  sub->add_option("-n,--n-gen", o->n_gen, "Generated tokens (tg)");
  sub->add_option("--disk-probe", o->disk_probe, "Bytes read to measure disk bandwidth (0: skip)");
  sub->add_option("--tg-input", o->tg_input,
                  "Tokens fed during tg: random (like llama-bench; varied expert routing) or greedy (the model's own "
                  "argmax continuation; repeats on random-weight models, flattering the cache)")
      ->check(CLI::IsMember({"random", "greedy"}));
  sub->add_flag("--json", o->json, "Also print one JSON line");
  return {sub, [o]() { return bench(*o); }};
}

}  // namespace strata::cli
