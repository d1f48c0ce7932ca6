// strata cachesim [TRACE] --budget B[,B..] --policy P[,P..]|all [--per-layer] [--phase decode|prefill|all]
//                 [--synthetic SPEC] [--expert-bytes N] [--keep-learned] [--write-trace FILE]
//                 [--vram B[,B..] [--tiers exclusive,exclusive-demote,inclusive] [--json]]
// Replays an expert routing trace through each cache policy and prints hit rates next to
// Belady's optimum for the same budget; with --vram, through two levels (experts/tier_sim.h).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>

#include "cli/commands.h"
#include "core/error.h"
#include "core/units.h"
#include "experts/cache_sim.h"
#include "experts/tier_sim.h"

namespace strata::cli {
namespace {

struct CachesimOptions {
  std::string trace;
  std::vector<std::string> budgets{"25%", "50%", "75%"};
  std::vector<std::string> policies{std::string(kDefaultPolicy)};
  bool per_layer = false;
  std::string phase = "decode";
  std::string synthetic;
  std::string expert_bytes;
  bool keep_learned = false;
  bool pretrain = false;
  bool replay_predictions = false;
  std::string write;
  std::vector<std::string> vram;  // --vram: the VRAM level's budgets (tiered replay)
  std::vector<std::string> tiers{"exclusive", "inclusive"};
  bool json = false;
};

struct Budget {
  std::string label;
  uint64_t bytes = 0;
};

// "50%" of all experts, "128" experts, or (with --expert-bytes) "64G" / "123456" bytes.
Budget parse_budget(const std::string& s, const CacheShape& shape, bool bytes_mode) {
  Budget b;
  b.label = s;
  const uint64_t total = shape.total_bytes();
  if (!s.empty() && s.back() == '%') {
    double pct = 0;
    try {
      pct = std::stod(s.substr(0, s.size() - 1));
    } catch (const std::exception&) {
      fail("budget '{}': not a percentage", s);
    }
    STRATA_CHECK(pct >= 0 && pct <= 100, "budget '{}': outside 0..100%", s);
    b.bytes = static_cast<uint64_t>(double(total) * pct / 100.0 + 1e-6);
  } else if (bytes_mode) {
    b.bytes = parse_bytes(s);
  } else {
    size_t used = 0;
    unsigned long long n = 0;
    try {
      n = std::stoull(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    STRATA_CHECK(used == s.size() && !s.empty(), "budget '{}': give a count of experts, a percentage, or bytes with --expert-bytes", s);
    b.bytes = n * shape.expert_bytes[0];
  }
  return b;
}

// ---- tiered replay (--vram) ---------------------------------------------------------------------

struct TierPair {
  Budget vram, ram;
};

std::vector<TierPair> tier_pairs(const CachesimOptions& o, const CacheShape& shape, bool bytes_mode) {
  STRATA_CHECK(o.vram.size() == 1 || o.vram.size() == o.budgets.size(), "cachesim: {} --vram budgets for {} --budget budgets (give one, or one each)",
               o.vram.size(), o.budgets.size());
  std::vector<TierPair> pairs;
  for (size_t i = 0; i < o.budgets.size(); ++i)
    pairs.push_back({parse_budget(o.vram[o.vram.size() == 1 ? 0 : i], shape, bytes_mode), parse_budget(o.budgets[i], shape, bytes_mode)});
  return pairs;
}

nlohmann::json tier_row_json(const TierResult& r, const CacheShape& shape) {
  const double acc = r.accesses ? double(r.accesses) : 1.0;
  return {{"policy", r.policy},
          {"tiers", tier_mode_name(r.mode)},
          {"steps", r.steps},
          {"accesses", r.accesses},
          {"vram_hits", r.vram_hits},
          {"ram_hits", r.ram_hits},
          {"ssd_reads", r.ssd_reads},
          {"transient_reads", r.transient},
          {"uploads", r.uploads},
          {"vram_hit_rate", double(r.vram_hits) / acc},
          {"ram_hit_rate", double(r.ram_hits) / acc},
          {"ssd_reads_per_token", r.per_step(r.ssd_reads)},
          {"ssd_bytes_per_token", r.per_step(r.bytes_ssd)},
          {"uploads_per_token", r.per_step(r.uploads)},
          {"expert_bytes", shape.expert_bytes[0]}};
}

std::string tier_cell_ssd(double reads, double bytes, bool bytes_mode) {
  return bytes_mode ? fmt::format("{:.2f} ({})", reads, format_bytes(uint64_t(bytes + 0.5))) : fmt::format("{:.2f}", reads);
}

std::string tier_budget_label(const Budget& b, const CacheShape& shape, bool bytes_mode) {
  return fmt::format("{} ({})", b.label, bytes_mode ? format_bytes(b.bytes) : fmt::format("{} experts", b.bytes / shape.expert_bytes[0]));
}

// One budget pair: a row per policy and tier mode, then the bounds, then exclusive's saving in
// SSD reads over inclusive; printed unless `json`, returned as JSON.
nlohmann::json tier_block(const CachesimOptions& o, const RoutingTrace& trace, const CacheShape& shape, TierSimOptions to, const TierPair& p,
                          const std::vector<std::string>& policies, const std::vector<TierMode>& modes, const TraceSteps& steps) {
  const bool bytes_mode = !o.expert_bytes.empty(), text = !o.json;
  to.vram_bytes = p.vram.bytes;
  to.ram_bytes = p.ram.bytes;
  nlohmann::json jrows = nlohmann::json::array(), jbounds = nlohmann::json::array();
  if (text)
    fmt::print("\nVRAM {} + RAM {}\n{:<18} {:<17} {:>8} {:>8} {:>22} {:>14}\n", tier_budget_label(p.vram, shape, bytes_mode),
               tier_budget_label(p.ram, shape, bytes_mode), "policy", "tiers", "VRAM hit", "RAM hit", bytes_mode ? "SSD reads (bytes)/tok" : "SSD reads/token",
               "uploads/token");
  std::vector<TierResult> rows;
  for (const auto& pol : policies)
    for (TierMode m : modes) {
      to.mode = m;
      const TierResult& r = rows.emplace_back(simulate_tiers(trace, shape, to, pol));
      jrows.push_back(tier_row_json(r, shape));
      if (text)
        fmt::print("{:<18} {:<17} {:>8.3f} {:>8.3f} {:>22} {:>14.2f}\n", pol, tier_mode_name(m), double(r.vram_hits) / double(r.accesses),
                   double(r.ram_hits) / double(r.accesses), tier_cell_ssd(r.per_step(r.ssd_reads), r.per_step(r.bytes_ssd), bytes_mode), r.per_step(r.uploads));
    }
  const double tok = double(steps.steps);
  for (TierMode m : modes) {
    to.mode = m;
    const TierBounds b = tier_bounds(trace, shape, to);
    jbounds.push_back({{"tiers", tier_mode_name(m)},
                       {"max_vram_hits", b.max_vram_hits},
                       {"max_vram_hit_rate", double(b.max_vram_hits) / double(steps.accesses)},
                       {"min_ssd_reads", b.min_ssd_reads},
                       {"min_ssd_reads_per_token", double(b.min_ssd_reads) / tok},
                       {"min_ssd_bytes_per_token", double(b.bytes_min_ssd) / tok}});
    if (text)
      fmt::print("{:<18} {:<17} {:>8} {:>8} {:>22}\n", "bound (belady)", tier_mode_name(m),
                 fmt::format("<={:.3f}", double(b.max_vram_hits) / double(steps.accesses)), "",
                 ">=" + tier_cell_ssd(double(b.min_ssd_reads) / tok, double(b.bytes_min_ssd) / tok, bytes_mode));
  }
  const auto inc = std::find(modes.begin(), modes.end(), TierMode::inclusive);
  for (size_t i = 0; text && inc != modes.end() && i < rows.size(); i += modes.size())
    for (size_t a = 0; a < modes.size(); ++a) {
      const TierResult &ex = rows[i + a], &in = rows[i + size_t(inc - modes.begin())];
      if (modes[a] != TierMode::inclusive && in.ssd_reads > 0)
        fmt::print("{:<18} {} reads {:.1f}% fewer SSD bytes per token than inclusive\n", ex.policy, tier_mode_name(modes[a]),
                   100.0 * (1.0 - double(ex.ssd_reads) / double(in.ssd_reads)));
    }
  return {{"vram", p.vram.label}, {"vram_bytes", p.vram.bytes}, {"ram", p.ram.label}, {"ram_bytes", p.ram.bytes}, {"rows", jrows}, {"bounds", jbounds}};
}

int run_tiers(const CachesimOptions& o, const RoutingTrace& trace, const CacheShape& shape, const std::vector<std::string>& policies) {
  TierSimOptions to;
  to.phase = parse_phase_filter(o.phase);
  to.per_layer = o.per_layer;
  const TraceSteps steps = count_steps(trace, to.phase);
  if (steps.accesses == 0) fail("cachesim: no accesses in phase {}", o.phase);
  std::vector<TierMode> modes;
  for (const auto& m : o.tiers) modes.push_back(parse_tier_mode(m));
  const std::string what = o.synthetic.empty() ? o.trace : "synthetic " + o.synthetic;
  if (!o.json)
    fmt::print("trace    {}: {} runs, {} layers x {} experts, top-{}; phase {}: {} steps, {} accesses\n"
               "tiers    VRAM <- RAM <- SSD, {} pool{} per level; exclusive: an expert in one level at most, VRAM victims dropped; "
               "exclusive-demote: VRAM victims moved into RAM; inclusive: VRAM copies RAM-resident experts\n",
               what, trace.runs.size(), trace.n_layer, trace.n_expert, trace.top_k, o.phase, steps.steps, steps.accesses,
               o.per_layer ? "per-layer" : "one global", o.per_layer ? "s" : "");
  nlohmann::json pairs = nlohmann::json::array();
  for (const TierPair& p : tier_pairs(o, shape, !o.expert_bytes.empty())) pairs.push_back(tier_block(o, trace, shape, to, p, policies, modes, steps));
  if (o.json)
    fmt::print("{}\n", nlohmann::json{{"trace", what}, {"n_layer", trace.n_layer}, {"n_expert", trace.n_expert}, {"top_k", trace.top_k}, {"phase", o.phase},
                                      {"steps", steps.steps}, {"accesses", steps.accesses}, {"per_layer", o.per_layer}, {"pairs", pairs}}
                           .dump(2));
  return 0;
}

int run_cachesim(const CachesimOptions& o) {
  STRATA_CHECK(!o.trace.empty() || !o.synthetic.empty(), "cachesim: give a TRACE file or --synthetic SPEC");
  RoutingTrace trace = o.synthetic.empty() ? read_trace(o.trace) : make_synthetic(parse_synthetic(o.synthetic));
  if (!o.write.empty()) write_trace(trace, o.write);
  STRATA_CHECK(!o.json || !o.vram.empty(), "cachesim: --json is the tiered report's (give --vram B)");
  const bool bytes_mode = !o.expert_bytes.empty();
  const CacheShape shape = trace_shape(trace, bytes_mode ? parse_bytes(o.expert_bytes) : 0);

  const bool tiered = !o.vram.empty();
  std::vector<std::string> policies;
  for (const auto& p : o.policies) {
    if (p == "all") {
      for (const auto& n : all_policy_names())
        if (!tiered || !n.starts_with("predict-pf")) policies.push_back(n);  // reads ahead: not in the tiered replay
    } else {
      policies.push_back(p);
    }
  }
  for (const auto& p : policies)  // unknown names fail before any output
    check_policy_spec(p);
  if (tiered) {
    STRATA_CHECK(!o.replay_predictions && !o.pretrain && !o.keep_learned,
                 "cachesim --vram: --replay-predictions, --pretrain and --keep-learned are one-level options");
    return run_tiers(o, trace, shape, policies);
  }

  SimOptions so;
  so.phase = parse_phase_filter(o.phase);
  so.budget.per_layer = o.per_layer;
  so.keep_learned = o.keep_learned;
  so.pretrain = o.pretrain;
  so.replay_predictions = o.replay_predictions;
  STRATA_CHECK(!o.replay_predictions || trace.n_predictions() > 0,
               "cachesim: --replay-predictions, but the trace has no prediction rows (record one with strata run --trace-experts and --lookahead >= 1)");

  const TraceSteps steps = count_steps(trace, so.phase);
  const uint64_t accesses = steps.accesses, tokens = steps.steps;
  fmt::print("trace    {}: {} runs, {} layers x {} experts, top-{}; phase {}: {} steps (tokens; a prompt chunk is one), {} accesses\n",
             o.synthetic.empty() ? o.trace : "synthetic " + o.synthetic, trace.runs.size(), trace.n_layer, trace.n_expert, trace.top_k, o.phase,
             tokens, accesses);
  if (trace.n_predictions() > 0)
    fmt::print("         {} lookahead prediction rows: {}\n", trace.n_predictions(),
               o.replay_predictions ? "replayed as the engine's prefetches (every policy; Belady stays demand-only)" : "ignored (--replay-predictions replays them)");
  fmt::print("cache    {} pool{}, {} per expert, cold start per run{}{}\n", o.per_layer ? "per-layer" : "one global", o.per_layer ? "s" : "",
             bytes_mode ? format_bytes(shape.expert_bytes[0]) : std::string("1 slot"), o.keep_learned ? " (policies keep what they learned)" : "",
             o.pretrain ? " (policies pretrained on the whole trace: an upper bound, not an online result)" : "");
  if (accesses == 0) fail("cachesim: no accesses in phase {}", o.phase);

  std::vector<Budget> budgets;
  for (const auto& s : o.budgets) budgets.push_back(parse_budget(s, shape, bytes_mode));
  std::vector<SimResult> belady;
  for (const auto& b : budgets) {
    so.budget.bytes = b.bytes;
    belady.push_back(simulate_belady(trace, shape, so));
  }

  // One column per budget: hit rate and its ratio to Belady's.
  size_t name_w = 8;
  for (const auto& p : policies) name_w = std::max(name_w, p.size() + 2);
  std::string head = fmt::format("{:<{}}", "policy", name_w);
  for (const auto& b : budgets) {
    const std::string cap = bytes_mode ? format_bytes(b.bytes) : fmt::format("{} experts", b.bytes / shape.expert_bytes[0]);
    head += fmt::format("  {:>22}", fmt::format("{} ({})", b.label, cap));
  }
  fmt::print("\nhit rate (ratio to Belady)\n{}\n", head);
  std::vector<std::vector<SimResult>> results(policies.size());
  bool any_prefetch = false;
  for (size_t pi = 0; pi < policies.size(); ++pi) {
    const auto& p = policies[pi];
    std::string row = fmt::format("{:<{}}", p, name_w);
    for (size_t i = 0; i < budgets.size(); ++i) {
      so.budget.bytes = budgets[i].bytes;
      const SimResult& r = results[pi].emplace_back(simulate(trace, shape, so, p));
      any_prefetch |= r.prefetches > 0;
      const double ratio = belady[i].hits ? double(r.hits) / double(belady[i].hits) : 1.0;
      row += fmt::format("  {:>22}", fmt::format("{:.3f} ({:5.1f}%)", r.hit_rate(), 100.0 * ratio));
    }
    fmt::print("{}\n", row);
  }
  std::string row = fmt::format("{:<{}}", "belady", name_w);
  for (const auto& r : belady) row += fmt::format("  {:>22}", fmt::format("{:.3f} (100.0%)", r.hit_rate()));
  fmt::print("{}\n", row);

  // The I/O side: a prefetching policy turns misses into hits by reading ahead, which costs reads
  // that demand paging (and Belady, which is demand-only here) would not do.
  fmt::print("\nreads per access: demand misses + prefetches{}\n{}\n",
             any_prefetch ? " (prefetches per access, share of them used); Belady reads on demand only" : "", head);
  for (size_t pi = 0; pi < policies.size(); ++pi) {
    std::string r2 = fmt::format("{:<{}}", policies[pi], name_w);
    for (const auto& r : results[pi]) {
      const double pf = r.accesses ? double(r.prefetches) / double(r.accesses) : 0.0;
      const double used = r.prefetches ? 100.0 * double(r.prefetches_used) / double(r.prefetches) : 0.0;
      r2 += fmt::format("  {:>22}", r.prefetches ? fmt::format("{:.3f} ({:.3f}, {:.0f}%)", r.reads_per_access(), pf, used)
                                                  : fmt::format("{:.3f}", r.reads_per_access()));
    }
    fmt::print("{}\n", r2);
  }
  std::string r3 = fmt::format("{:<{}}", "belady", name_w);
  for (const auto& r : belady) r3 += fmt::format("  {:>22}", fmt::format("{:.3f}", r.reads_per_access()));
  fmt::print("{}\n", r3);
  return 0;
}

}  // namespace

Command add_cachesim(CLI::App& app) {
  auto o = std::make_shared<CachesimOptions>();
  auto* sub = app.add_subcommand("cachesim", "replay an expert routing trace through cache policies, next to Belady's optimum");
  sub->add_option("trace", o->trace, "routing trace CSV (Strata's format, or run/phase/token_index/layer/expert_0.. columns)");
  sub->add_option("--budget,-b", o->budgets, "cache sizes: a count of experts, a percentage of all experts (50%), or bytes with --expert-bytes")
      ->delimiter(',');
  sub->add_option("--policy,-p", o->policies,
                  "lru, lfu, lfu-decay[:HALF_LIFE], admit-N[:WINDOW], pinned[:FRACTION], predict[:HALF_LIFE], "
                  "predict-pf[:MARGIN] (prefetches), default, all; "
                  "belady:H = Belady seeing only H tokens ahead; belady-bypass[:H] = the optimum when a miss may be served without being kept")
      ->delimiter(',');
  sub->add_flag("--per-layer", o->per_layer, "one pool per layer (each gets the same fraction of its experts) instead of one global pool");
  sub->add_option("--phase", o->phase, "decode (default), prefill or all")->check(CLI::IsMember({"decode", "prefill", "all"}));
  sub->add_option("--synthetic", o->synthetic,
                  "generate the trace: layers=24,experts=64,k=6,tokens=1000,runs=2,zipf=1.0,reuse=0.3,shift=0,seed=1 (any subset)");
  sub->add_option("--expert-bytes", o->expert_bytes, "bytes per expert (e.g. 12M): budgets without % are then bytes");
  sub->add_flag("--keep-learned", o->keep_learned, "policies keep their statistics from one run to the next (the cache still starts empty)");
  sub->add_flag("--replay-predictions", o->replay_predictions,
                "replay the router-lookahead predictions the trace recorded (strata run --trace-experts with --lookahead) as the engine's "
                "prefetches, for every policy (Belady stays demand-only)");
  sub->add_flag("--pretrain", o->pretrain,
                "policies first learn from one uncounted replay of the whole trace (with predict:0, a Markov predictor fitted in-sample: an upper bound on "
                "what online statistics can reach)");
  sub->add_option("--write-trace", o->write, "also write the trace in Strata's format");
  sub->add_option("--vram", o->vram,
                  "two levels VRAM <- RAM <- SSD: the VRAM budgets (as --budget; one for every --budget, or one each), --budget is then RAM's")
      ->delimiter(',');
  sub->add_option("--tiers", o->tiers, "with --vram: exclusive (VRAM victims dropped), exclusive-demote (moved into RAM), inclusive")
      ->delimiter(',')
      ->check(CLI::IsMember({"exclusive", "exclusive-demote", "inclusive"}));
  sub->add_flag("--json", o->json, "with --vram: print the tiered report as JSON");
  return {sub, [o] { return run_cachesim(*o); }};
}

}  // namespace strata::cli
