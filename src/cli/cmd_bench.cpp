// strata bench: llama-bench-like figures (pp and tg tokens/s) plus the expert tier's numbers:
// hit rate, bytes read per token, achieved read bandwidth, and the fraction of the physical
// limit (time the I/O alone needs at the measured disk bandwidth / time per token).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <numeric>
#include <random>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "core/clock.h"
#include "core/error.h"
#include "kernels/kernel_table.h"
#include "model/executor.h"
#include "core/units.h"
#include "experts/disk_probe.h"
#include "runtime/model_copy.h"
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
  // --pass-rows: compute time per forward pass by row count, passes built as the server's
  // decoding slots build them (instead of pp/tg).
  int pass_rows = 0;
  int pass_slots = 4;
  int pass_reps = 30;
  int pass_pos = 64;  // each slot's cached rows before a timed pass
};

int probe_depth(const ModelOptions& mo) { return disk_probe_depth(mo.ram_budget.empty() ? 0 : parse_bytes(mo.ram_budget), mo.queue_depth); }

struct Phase {
  const char* name;
  int tokens;
  double seconds;
  ExpertCacheCounters delta;
  nlohmann::json gpu;    // device_json of the phase (null without --gpu)
  std::string gpu_line;  // device_line of the phase
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

// The rows of slot i in a pass of `rows` rows over `slots` decoding slots: one decoding token
// each (the first min(rows, slots) slots), the rows beyond that drafts dealt out in turn.
int pass_rows_of(int i, int rows, int slots) {
  const int active = std::min(rows, slots);
  if (i >= active) return 0;
  const int extra = rows - active;
  return 1 + extra / active + (i < extra % active ? 1 : 0);
}

// Compute seconds (wall minus time blocked on expert reads) of forward passes of 1..pass_rows
// rows as a server with pass_slots decoding slots builds them: a slot with drafts verifies its
// rows in decode order with every row's logits, a slot without one decodes its one token. Row
// counts take turns, each repetition runs every count once (load changes hit them alike); after
// each pass the slots drop the new rows again.
int bench_pass_rows(const BenchOptions& o, Engine& eng) {
  const int slots = o.pass_slots, nv = eng.config().n_vocab;
  STRATA_CHECK(slots >= 1 && slots <= eng.n_seq(), "--pass-slots {} needs 1..{} sequence slots", slots, eng.n_seq());
  STRATA_CHECK(o.pass_rows >= 1 && o.pass_rows <= eng.options().n_batch, "--pass-rows {} is outside 1..{} (-b)", o.pass_rows, eng.options().n_batch);
  STRATA_CHECK(o.pass_pos + o.pass_rows <= eng.options().n_ctx, "--pass-pos {} + --pass-rows {} exceed the context {} (use -c)", o.pass_pos, o.pass_rows,
               eng.options().n_ctx);
  std::mt19937 rng(1234);
  auto token = [&] { return static_cast<int32_t>(rng() % static_cast<uint32_t>(nv)); };
  std::vector<float> logits;
  for (int s = 0; s < slots; ++s) {
    std::vector<int32_t> prompt(static_cast<size_t>(o.pass_pos));
    for (auto& t : prompt) t = token();
    eng.eval(s, prompt.data(), o.pass_pos, 0, false, logits);
  }
  const int R = o.pass_rows;
  std::vector<std::vector<double>> secs(static_cast<size_t>(R) + 1);
  std::vector<std::vector<int32_t>> toks(static_cast<size_t>(slots));
  std::vector<SeqInput> inputs;
  for (int rep = 0; rep < o.pass_reps + 1; ++rep) {  // repetition 0 warms up
    for (int rows = 1; rows <= R; ++rows) {
      inputs.clear();
      for (int s = 0; s < slots; ++s) {
        const int n = pass_rows_of(s, rows, slots);
        if (n == 0) continue;
        toks[s].resize(static_cast<size_t>(n));
        for (auto& t : toks[s]) t = token();
        inputs.push_back(n == 1 ? SeqInput{s, toks[s].data(), 1, Logits::Last} : SeqInput{s, toks[s].data(), n, Logits::All, /*decode_order=*/true});
      }
      const double wait0 = eng.tier().counters().wait_s, t0 = clock_s();
      eng.forward(inputs, logits);
      const double dt = clock_s() - t0 - (eng.tier().counters().wait_s - wait0);
      if (rep > 0) secs[static_cast<size_t>(rows)].push_back(dt);
      for (const SeqInput& in : inputs) eng.truncate(in.seq, o.pass_pos);
    }
  }
  fmt::print("{}\n", eng.tier().plan().describe());
  fmt::print("compute per pass ({} decoding slots at position {}, {} passes per row count, {} threads)\n", slots, o.pass_pos, o.pass_reps,
             eng.options().n_threads);
  fmt::print("| rows | rows per slot | median ms | mean ms | ms per row | median / {}-row median |\n", std::min(slots, R));
  fmt::print("|------|---------------|-----------|---------|------------|-----------------------|\n");
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  const double base = median(secs[static_cast<size_t>(std::min(slots, R))]);
  nlohmann::json j = nlohmann::json::array();
  for (int rows = 1; rows <= R; ++rows) {
    const auto& v = secs[static_cast<size_t>(rows)];
    const double med = median(v), mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(std::max<size_t>(1, v.size()));
    std::string per;
    for (int s = 0; s < slots; ++s)
      if (const int n = pass_rows_of(s, rows, slots)) per += fmt::format("{}{}", per.empty() ? "" : "+", n);
    fmt::print("| {:>4} | {:<13} | {:>9.3f} | {:>7.3f} | {:>10.3f} | {:>21.2f} |\n", rows, per, med * 1e3, mean * 1e3, med * 1e3 / rows,
               base > 0 ? med / base : 0.0);
    j.push_back({{"rows", rows}, {"rows_per_slot", per}, {"median_s", med}, {"mean_s", mean}});
  }
  if (o.json) fmt::print("{}\n", nlohmann::json{{"pass_rows", j}}.dump());
  return 0;
}

int bench(const BenchOptions& o) {
  if (o.pass_rows > 0) {
    ModelOptions mo = o.model;
    mo.n_seq = std::max(mo.n_seq, o.pass_slots);
    auto loaded = load_engine(mo);
    return bench_pass_rows(o, *loaded.engine);
  }
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
  LayerExecutor* ex = eng.model().executor();
  if (ex) ex->reset_stats();
  if (o.n_prompt > 0) {
    const double t0 = clock_s();
    {
      const PromptPass pp(loaded, o.n_prompt, o.model.pp_min_tokens);  // --pp-model
      eng.eval(0, prompt.data(), o.n_prompt, 0, false, logits);
    }
    const double dt = clock_s() - t0;
    ExpertCacheCounters c1 = eng.tier().counters();
    phases.push_back({"pp", o.n_prompt, dt, diff(c1, c0), device_json(eng, o.n_prompt, dt), device_line(eng, o.n_prompt, dt)});
    if (ex) ex->reset_stats();
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
    phases.push_back({"tg", o.n_gen, dt, diff(c1, c0), device_json(eng, o.n_gen, dt), device_line(eng, o.n_gen, dt)});
  }
  // The cache as it is now (a background load that ended during the run dropped it).
  ExpertCache* cache = eng.tier().cache();
  // Every drive (the file and each --model-copy) alone and all at once; the limit is all at once.
  const DriveProbe probe = cache && o.disk_probe > 0 ? measure_tier_drives(eng.tier(), eng.options().tier, probe_depth(o.model), o.disk_probe) : DriveProbe{};
  const double disk = probe.all_bw;
  nlohmann::json j;
  j["model"] = o.model.path;
  j["threads"] = eng.options().n_threads;
  j["tg_input"] = o.tg_input;
  j["plan"] = eng.tier().plan().describe();
  j["peak_rss"] = process_peak_rss();
  j["disk_bw"] = disk;
  if (probe.drive_bw.size() > 1) j["disk_drives_bw"] = probe.drive_bw;
  j["kernels"] = kernel_choice();
  fmt::print("{}\n", eng.tier().plan().describe());
  fmt::print("kernels: {}\n", kernel_choice());
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
    if (ex) j[name]["gpu"] = p.gpu;
  }
  for (const auto& p : phases)
    if (ex) fmt::print("{}{} {}\n", p.name, p.tokens, p.gpu_line);
  if (disk > 0 && probe.drive_bw.size() > 1) {
    std::string each;
    for (size_t i = 0; i < probe.drive_bw.size(); ++i) each += fmt::format("{}{:.2f}", i ? ", " : "", probe.drive_bw[i] / 1e9);
    fmt::print("disk (measured, {} random 4 MiB reads per drive at queue depth {}): {} drives, {} GB/s each alone, {:.2f} GB/s all at once (the limit); "
               "peak RSS {}\n",
               format_bytes(o.disk_probe), probe_depth(o.model), probe.drive_bw.size(), each, disk / 1e9, format_bytes(process_peak_rss()));
  } else if (disk > 0)
    fmt::print("disk (measured, {} random 4 MiB reads at queue depth {}): {:.2f} GB/s; peak RSS {}\n", format_bytes(o.disk_probe), probe_depth(o.model),
               disk / 1e9, format_bytes(process_peak_rss()));
  else
    fmt::print("disk: not measured ({}); peak RSS {}\n", cache ? "--disk-probe 0" : "experts resident", format_bytes(process_peak_rss()));
  if (eng.tier().plan().warm_s > 0) fmt::print("load: {:.1f} s reading the model into the page cache\n", eng.tier().plan().warm_s);
  j["warm_s"] = eng.tier().plan().warm_s;
  const nlohmann::json ep = finish_expert_parallel(loaded.ep);
  if (!ep.is_null()) j["expert_parallel"] = ep;
  if (const nlohmann::json numa = finish_numa(loaded); !numa.is_null()) j["numa"] = numa;
  add_knob_figures(loaded, j);
  if (o.json) fmt::print("{}\n", j.dump());
  return 0;
}

}  // namespace

Command add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  auto* sub = app.add_subcommand("bench", "Prompt processing and generation speed, with the expert tier's figures");
  add_model_options(sub, o->model);
  add_pp_options(sub, o->model);
  add_ep_options(sub, o->model);
  sub->add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens (pp)");
  sub->add_option("-n,--n-gen", o->n_gen, "Generated tokens (tg)");
  sub->add_option("--disk-probe", o->disk_probe, "Bytes read to measure disk bandwidth (0: skip)");
  sub->add_option("--tg-input", o->tg_input,
                  "Tokens fed during tg: random (like llama-bench; varied expert routing) or greedy (the model's own "
                  "argmax continuation; repeats on random-weight models, flattering the cache)")
      ->check(CLI::IsMember({"random", "greedy"}));
  sub->add_flag("--json", o->json, "Also print one JSON line");
  sub->add_option("--pass-rows", o->pass_rows,
                  "Instead of pp/tg: compute time per forward pass of 1..N rows built as the server's decoding slots build them "
                  "(one token per slot, the rows beyond verified drafts)")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--pass-slots", o->pass_slots, "--pass-rows: decoding slots")->check(CLI::Range(1, 256));
  sub->add_option("--pass-reps", o->pass_reps, "--pass-rows: timed passes per row count")->check(CLI::Range(1, 100000));
  sub->add_option("--pass-pos", o->pass_pos, "--pass-rows: rows each slot holds before a timed pass")->check(CLI::Range(1, 1 << 20));
  return {sub, [o]() { return bench(*o); }};
}

}  // namespace strata::cli
