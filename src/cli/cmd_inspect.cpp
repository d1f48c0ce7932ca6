// strata inspect MODEL.gguf [--ram-budget BYTES] [--vram-budget BYTES [-c N] [-b N] [--parallel N]
//                [--cache-type-k/v T]] [--json] [--tensors] [--metadata]
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <memory>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "core/error.h"
#include "core/units.h"
#include "gguf/gguf_file.h"
#include "model/model_summary.h"
#include "model/vram_plan.h"
#include "runtime/ep_plan.h"

namespace strata::cli {
namespace {

struct InspectOptions {
  std::string model;
  std::string budget;
  std::string vram_budget;  // a plan of the GPU side (no device needed)
  int n_ctx = 4096, n_batch = 512, n_seq = 1;  // the run's shape the plan is for (run's defaults)
  std::string cache_type_k = "f16", cache_type_v = "f16";
  bool json = false;
  bool tensors = false;
  bool metadata = false;
  int ep = 0;  // --ep R: the expert-parallel shard plan for R ranks
  double ep_replicate = 0;
  std::string stats_dir;
};

// --ep R: the plan's summary and, per MoE layer, each rank's experts (replicas marked *).
void print_ep(const EpPlan& p) {
  fmt::print("{}", p.describe());
  for (int l = 0; l < p.n_layer; ++l) {
    if (p.owner_of(l, 0) < 0) continue;
    fmt::print("  layer {:>3}:", l);
    for (int r = 0; r < p.ranks; ++r) {
      fmt::print(" | rank {}:", r);
      for (int e = 0; e < p.n_expert; ++e)
        if (p.owner_of(l, e) == r) fmt::print(" {}{}", e, p.is_replica(l, e) ? "*" : "");
    }
    fmt::print("\n");
  }
}

nlohmann::json ep_json(const EpPlan& p) {
  nlohmann::json layers = nlohmann::json::array();
  for (int l = 0; l < p.n_layer; ++l) {
    if (p.owner_of(l, 0) < 0) continue;
    nlohmann::json owner = nlohmann::json::array(), rep = nlohmann::json::array();
    for (int e = 0; e < p.n_expert && p.owner_of(l, e) >= 0; ++e) owner.push_back(p.owner_of(l, e)), rep.push_back(p.is_replica(l, e));
    layers.push_back({{"layer", l}, {"owner", owner}, {"replica", rep}});
  }
  return {{"ranks", p.ranks}, {"by_traffic", p.by_traffic}, {"bytes", p.bytes}, {"traffic", p.traffic}, {"experts", p.experts}, {"layers", layers}};
}

template <typename T>
std::string opt_str(const std::optional<T>& v) {
  return v ? fmt::format("{}", *v) : "-";
}

// Per-type histogram, dense and routed experts side by side, with bits per weight.
void print_type_mix(const ModelSummary& s) {
  auto bpw = [](uint64_t bytes, uint64_t values) { return values ? 8.0 * static_cast<double>(bytes) / static_cast<double>(values) : 0.0; };
  auto cell = [&](int64_t n, uint64_t bytes, uint64_t values) {
    return n ? fmt::format("{:>5} {:>10} {:>5.2f} bpw", n, format_bytes(bytes), bpw(bytes, values)) : fmt::format("{:>26}", "-");
  };
  fmt::print("  {:<8} {:>26}   {:>26}\n", "type", "dense: tensors bytes", "routed experts: tensors bytes");
  for (const auto& [name, tu] : s.types)
    fmt::print("  {:<8} {}   {}\n", name, cell(tu.tensors - tu.routed_tensors, tu.bytes - tu.routed_bytes, tu.values - tu.routed_values),
               cell(tu.routed_tensors, tu.routed_bytes, tu.routed_values));
}

void print_text(const GgufModel& m, const ModelSummary& s, const std::optional<BudgetFit>& fit, const InspectOptions& o) {
  const auto& h = s.hp;
  fmt::print("model          {}\n", s.path);
  fmt::print("parts          {} file(s), {} ({} bytes), GGUF v{}\n", m.parts().size(), format_bytes(s.file_bytes), s.file_bytes, m.parts()[0]->version);
  fmt::print("architecture   {}{}\n", h.arch, h.name.empty() ? "" : fmt::format("  ({})", h.name));
  fmt::print("layers         {}   embedding {}   vocab {}   context {}\n", opt_str(h.n_layer), opt_str(h.n_embd), opt_str(h.n_vocab),
             opt_str(h.n_ctx_train));
  if (h.nextn_predict_layers && *h.nextn_predict_layers > 0) {
    const int64_t n = *h.nextn_predict_layers, L = h.n_layer.value_or(0);
    fmt::print("nextn          {} NextN (multi-token prediction) layer{} (blocks {}..{} of {}): loaded and checked, not run by the forward pass\n", n,
               n == 1 ? "" : "s", L - n, L - 1, L);
  }
  fmt::print("attention      heads {}   kv heads {}   head dim k/v {}/{}", opt_str(h.n_head), opt_str(h.n_head_kv), opt_str(h.head_dim_k),
             opt_str(h.head_dim_v));
  if (h.q_lora_rank || h.kv_lora_rank) fmt::print("   q_lora {}   kv_lora {}", opt_str(h.q_lora_rank), opt_str(h.kv_lora_rank));
  if (h.sliding_window) fmt::print("   sliding window {}", *h.sliding_window);
  fmt::print("\n");
  fmt::print("experts        {} routed, {} used per token, {} shared   expert ffn {}   dense ffn {}   leading dense layers {}\n",
             opt_str(h.n_expert), opt_str(h.n_expert_used), opt_str(h.n_expert_shared), opt_str(h.n_ff_exp), opt_str(h.n_ff),
             opt_str(h.n_leading_dense));
  if (h.n_expert_groups) fmt::print("expert groups  {} groups, {} used\n", *h.n_expert_groups, opt_str(h.n_expert_groups_used));
  if (h.expert_gating_func || h.expert_weights_scale || h.expert_weights_norm)
    fmt::print("routing        gating func {}   weights scale {}   weights norm {}\n", opt_str(h.expert_gating_func), opt_str(h.expert_weights_scale),
               opt_str(h.expert_weights_norm));
  fmt::print("rope           base {}   dims {}", opt_str(h.rope_freq_base), opt_str(h.rope_dim));
  if (h.rope_scaling_type)
    fmt::print("   scaling {} x{} (original context {})", *h.rope_scaling_type, opt_str(h.rope_scaling_factor), opt_str(h.rope_scaling_orig_ctx));
  fmt::print("\n");
  if (h.hash_layer_count || h.hyper_connection_count || !h.compress_ratios.empty()) {
    std::string cr;
    for (size_t k = 0; k < h.compress_ratios.size(); ++k) cr += (k ? "," : "") + std::to_string(h.compress_ratios[k]);
    fmt::print("deepseek4      hash layers {}   hyper-connections {}   compress ratios [{}]\n", opt_str(h.hash_layer_count),
               opt_str(h.hyper_connection_count), cr);
  }
  if (h.indexer_heads || h.indexer_top_k)
    fmt::print("indexer        heads {} x {}   top-k {}\n", opt_str(h.indexer_heads), opt_str(h.indexer_dim), opt_str(h.indexer_top_k));
  fmt::print("tensors        {}\n", s.n_tensors);
  print_type_mix(s);
  fmt::print("dense          {:>12}  ({} bytes, always resident)\n", format_bytes(s.dense_bytes), s.dense_bytes);
  fmt::print("routed experts {:>12}  ({} bytes, {} experts, streamable)\n", format_bytes(s.routed_bytes), s.routed_bytes, s.n_routed_experts);
  fmt::print("touched/token  {:>12}  ({} bytes: dense with one embedding row + top-k experts per MoE layer)\n", format_bytes(s.touched_per_token),
             s.touched_per_token);
  fmt::print("  dense        {:>12}  (resident)\n  routed       {:>12}  (read per token when no expert is cached: {:.1f} MB/token)\n",
             format_bytes(s.touched_dense), format_bytes(s.touched_routed), static_cast<double>(s.touched_routed) / 1e6);
  std::string per_layer;
  uint64_t last = UINT64_MAX;
  for (const auto& lb : s.layers) {
    if (lb.n_expert == 0) continue;
    if (lb.expert_bytes != last) per_layer += fmt::format("{}L{}: {}", per_layer.empty() ? "" : ", ", lb.layer, format_bytes(lb.expert_bytes));
    last = lb.expert_bytes;
  }
  if (!per_layer.empty()) fmt::print("one expert     {}\n", per_layer);
  if (fit) {
    fmt::print("ram budget     {}: ", format_bytes(fit->budget));
    if (!fit->dense_fits)
      fmt::print("the dense weights alone ({}) exceed it\n", format_bytes(fit->dense_bytes));
    else if (fit->all_fits)
      fmt::print("the whole model fits; experts stay resident ({} to spare)\n", format_bytes(fit->expert_cache_bytes - s.routed_bytes));
    else
      fmt::print("at most {} for the expert cache: {} of {} experts ({:.1f}% of routed bytes); the KV cache and scratch of a run "
                 "come off this (its plan: strata run --json, memory)\n",
                 format_bytes(fit->expert_cache_bytes), fit->experts_fit, fit->experts_total, 100.0 * fit->routed_fraction);
  }
  if (o.metadata) {
    fmt::print("metadata\n");
    for (const auto& [k, v] : m.metadata()) fmt::print("  {} = {}\n", k, v.to_string());
  }
  if (o.tensors) {
    fmt::print("tensor list\n");
    for (const auto& t : m.tensors())
      fmt::print("  {:<40} {:<7} {:<16} part {} offset {} bytes {}\n", t.name, ggml_type_name(t.type), t.shape_string(), t.part, t.offset, t.nbytes);
  }
}

// The GPU side under --vram-budget: the model's layers placed as the Vulkan executor would place
// them (model/vram_plan.h). `why` is set instead when the executor does not run the model.
struct VramInspect {
  VramPlan plan;
  std::string why;
  int n_ctx = 0;
};

VramInspect plan_gpu_side(const InspectOptions& o) {
  VramInspect v;
  auto model = Model::load(o.model);
  const ModelConfig& cfg = model->config();
  VramShape s;
  s.n_ctx = o.n_ctx > 0 ? o.n_ctx : std::max(1, cfg.n_ctx_train);
  s.n_seq = o.n_seq;
  s.n_batch = o.n_batch;
  s.type_k = cache_type(o.cache_type_k);
  s.type_v = cache_type(o.cache_type_v);
  s.budget = parse_vram_budget(o.vram_budget);
  v.n_ctx = s.n_ctx;
  v.why = vulkan_unsupported(cfg, model->weights(), s.type_k, s.type_v);
  if (v.why.empty()) v.plan = plan_vram(cfg, model->weights(), s);
  return v;
}

void print_vram(const VramInspect& v, const ModelSummary& s, const InspectOptions& o) {
  fmt::print("vram budget    {}: ", o.vram_budget);
  if (!v.why.empty()) {
    fmt::print("--gpu vulkan would not run this model: {}\n", v.why);
    return;
  }
  const VramPlan& p = v.plan;
  fmt::print("{} of {} layers on the GPU", p.gpu_layers, p.n_layer);
  if (p.gpu_layers > 0) fmt::print(" (layers 0..{})", p.gpu_layers - 1);
  fmt::print(": layer weights {} + KV cache {} ({}/{}, {} positions x {} sequences) + scratch {} (batch {}) = {} of {}\n", format_bytes(p.weights),
             format_bytes(p.kv), ggml_type_name(p.type_k), ggml_type_name(p.type_v), v.n_ctx, o.n_seq, format_bytes(p.scratch), o.n_batch,
             format_bytes(p.total()), format_bytes(p.budget));
  fmt::print("  on the CPU   ");
  if (p.gpu_layers < p.n_layer) fmt::print("layers {}..{} (all their weights and KV cache); ", p.gpu_layers, p.n_layer - 1);
  fmt::print("routed experts ({}, the expert tier: --ram-budget), token embeddings and the output head\n", format_bytes(s.routed_bytes));
  if (!p.cpu_blocks.empty()) fmt::print("  CPU blocks   {} (the hidden rows cross the bus around each)\n", p.cpu_blocks);
  if (!p.note.empty()) fmt::print("  why          {}\n", p.note);
}

nlohmann::json vram_inspect_json(const VramInspect& v, const InspectOptions& o) {
  if (!v.why.empty()) return {{"budget", parse_vram_budget(o.vram_budget)}, {"unsupported", v.why}};
  const VramPlan& p = v.plan;
  nlohmann::json layers = nlohmann::json::array();
  for (int l = 0; l < p.n_layer; ++l)
    layers.push_back({{"layer", l}, {"weights", p.layer_weights[l]}, {"kv", p.layer_kv[l]}, {"on", l < p.gpu_layers ? "gpu" : "cpu"}});
  return {{"budget", p.budget},       {"gpu_layers", p.gpu_layers}, {"n_layer", p.n_layer}, {"weights", p.weights}, {"kv", p.kv},
          {"scratch", p.scratch},     {"planned", p.total()},       {"n_ctx", v.n_ctx},     {"n_seq", o.n_seq},   {"n_batch", o.n_batch},
          {"kv_type_k", ggml_type_name(p.type_k)}, {"kv_type_v", ggml_type_name(p.type_v)}, {"note", p.note}, {"cpu_blocks", p.cpu_blocks}, {"layers", layers}};
}

}  // namespace

Command add_inspect(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  auto* sub = app.add_subcommand("inspect", "Show architecture, hyperparameters, and dense vs routed-expert bytes of a GGUF model");
  sub->add_option("model", o->model, "GGUF file (first part of a split model)")->required();
  sub->add_option("--ram-budget", o->budget, "RAM budget (e.g. 64G, 512M) to plan the expert cache for");
  sub->add_option("--vram-budget", o->vram_budget,
                  "GPU memory (e.g. 24G) to plan the Vulkan executor's placement for: which layers on the GPU, their weights, KV cache "
                  "and scratch (no device needed)");
  sub->add_option("-c,--ctx-size", o->n_ctx, "With --vram-budget: context size the KV cache is planned for (0: the model's)")->check(CLI::Range(0, 1 << 24));
  sub->add_option("-b,--batch-size", o->n_batch, "With --vram-budget: tokens per pass the scratch is planned for")->check(CLI::Range(1, 1 << 16));
  sub->add_option("--parallel", o->n_seq, "With --vram-budget: sequences (server slots) the KV cache is planned for")->check(CLI::Range(1, 4096));
  sub->add_option("--cache-type-k", o->cache_type_k, "With --vram-budget: K cache type (f32, f16)");
  sub->add_option("--cache-type-v", o->cache_type_v, "With --vram-budget: V cache type (f32, f16)");
  sub->add_flag("--json", o->json, "Print JSON");
  sub->add_flag("--tensors", o->tensors, "List every tensor");
  sub->add_flag("--metadata", o->metadata, "List every metadata key");
  sub->add_option("--ep", o->ep, "The expert-parallel shard plan for R ranks (what mpirun -n R ... --expert-parallel uses)")->check(CLI::Range(1, 4096));
  sub->add_option("--ep-replicate", o->ep_replicate, "With --ep: fraction of each layer's hottest experts on every rank")->check(CLI::Range(0.0, 1.0));
  sub->add_option("--stats-dir", o->stats_dir, "With --ep: directory of the warm-start usage statistics (default as run's)");
  return {sub, [o]() {
    if (o->ep > 0) {
      const EpPlan p = plan_for_model(*Model::load(o->model), o->ep, o->ep_replicate, o->stats_dir);
      if (o->json) fmt::print("{}\n", ep_json(p).dump());
      else print_ep(p);
      return 0;
    }
    auto m = GgufModel::open(o->model);
    auto s = ModelSummary::of(*m);
    std::optional<BudgetFit> fit;
    if (!o->budget.empty()) fit = BudgetFit::plan(s, parse_bytes(o->budget));
    std::optional<VramInspect> vram;
    if (!o->vram_budget.empty()) vram = plan_gpu_side(*o);
    if (o->json) {
      auto j = s.to_json();
      if (fit) j["ram_budget"] = fit->to_json();
      if (vram) j["vram_budget"] = vram_inspect_json(*vram, *o);
      if (o->metadata) {
        nlohmann::json md = nlohmann::json::object();
        for (const auto& [k, v] : m->metadata()) md[std::string(k)] = v.to_string();
        j["metadata"] = md;
      }
      if (o->tensors) {
        nlohmann::json tl = nlohmann::json::array();
        for (const auto& t : m->tensors())
          tl.push_back({{"name", t.name}, {"type", ggml_type_name(t.type)}, {"ne", std::vector<uint64_t>(t.ne.begin(), t.ne.begin() + t.n_dims)},
                        {"part", t.part}, {"offset", t.offset}, {"bytes", t.nbytes}});
        j["tensors"] = tl;
      }
      fmt::print("{}\n", j.dump(2));
    } else {
      print_text(*m, s, fit, *o);
      if (vram) print_vram(*vram, s, *o);
    }
    return 0;
  }};
}

}  // namespace strata::cli
