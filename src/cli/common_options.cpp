#include "cli/common_options.h"

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "core/error.h"
#include "core/units.h"
#include "experts/expert_cache.h"
#include "runtime/expert_tier.h"
#include "experts/warm_stats.h"
#include "gguf/gguf_file.h"
#include "gpu/device.h"
#include "model/executor.h"
#include "model/vram_experts.h"
#include "model/vulkan_executor.h"
#include "runtime/device_report.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul.h"
#include "runtime/model_copy.h"
#include "runtime/slot_draft.h"
#include "tokenizer/vocab.h"

namespace strata::cli {

void add_model_options(CLI::App* sub, ModelOptions& o) {
  sub->add_option("-m,--model", o.path, "GGUF model (first part of a split model)")->required();
  sub->add_option("-c,--ctx-size", o.n_ctx, "Context size in tokens (0: the model's)")->check(CLI::Range(0, 1 << 24));
  sub->add_option("-t,--threads", o.n_threads, "Threads (0: all cores)")->check(CLI::Range(0, 1024));
  sub->add_option("-b,--batch-size", o.n_batch, "Prompt tokens per forward pass")->check(CLI::Range(1, 1 << 16));
  sub->add_option("--cache-type-k", o.cache_type_k, "K cache type: f32, f16, q8_0");
  sub->add_option("--cache-type-v", o.cache_type_v, "V cache type: f32, f16, q8_0");
  sub->add_option("--isa", o.isa, "Kernel ISA: auto, scalar, avx2, avxvnni, avx512 (x86-64); neon, neon-dotprod (ARM64)");
  sub->add_option("--gemm", o.gemm,
                  "Products of >= 128 tokens: int8 (default, llama.cpp's arithmetic) or blas (OpenBLAS sgemm on "
                  "dequantized weights; not bit-identical to llama.cpp)");
  sub->add_option("--gpu", o.gpu,
                  "GPU: none (default), auto (a discrete GPU when there is one, else the CPU with a note), vulkan, vulkan:N "
                  "(strata gpu lists them); attention, dense weights, routers, shared experts and the routed experts in VRAM "
                  "(--vram-experts) run there, the other routed experts and blocks without device kernels (MLA, DeltaNet) on the CPU; "
                  "DeepSeek-V4 is refused");
  sub->add_option("--vram-budget", o.vram_budget,
                  "With --gpu: device memory for layer weights, KV cache and scratch (e.g. 24G, 512M; default: the device's memory less "
                  "10%, at least 512M); the leading layers that fit run on the GPU, the rest on the CPU");
  sub->add_option("--vram-experts", o.vram_experts,
                  "With --gpu: device memory for routed experts once every layer is on the GPU: auto (default: what the layers leave "
                  "of --vram-budget), off, or a size; the experts it holds run on the GPU while the CPU computes the others");
  sub->add_option("--tiers", o.tiers,
                  "With --vram-experts: exclusive (default: an expert promoted to VRAM gives up its RAM slot) or inclusive (RAM keeps "
                  "a copy of every expert in VRAM)");
  sub->add_option("--vram-upload", o.vram_upload, "With --vram-experts: bytes of experts promoted to VRAM per forward pass at most (default 64M)");
  sub->add_option("--vram-pp", o.vram_pp,
                  "With --vram-experts: prompt passes upload experts that are not in VRAM and compute them on the GPU when their "
                  "measured cost is lower there: auto (default), always, off");
  sub->add_option("--ram-budget", o.ram_budget, "Hard memory budget (e.g. 64G, 6G, 512M): dense weights, KV and scratch first, the rest caches experts");
  sub->add_option("--cache-experts", o.cache_experts, "Cap the expert cache at N experts (forces streaming; for tests on tiny models)");
  sub->add_option("--cache-policy", o.policy, "Expert cache policy: default, lru, lfu, lfu-decay[:H], admit-N[:W], pinned[:F], predict");
  sub->add_option("--lookahead", o.lookahead, "MoE layers ahead whose experts are predicted and prefetched (0: off)")->check(CLI::Range(0, 64));
  sub->add_option("--moe-k", o.moe_k,
                  "Compute at most K of the experts the router chooses per token and layer (the heaviest; 0: the model's k). Lossy: "
                  "price it with strata perplexity --kl-divergence")
      ->check(CLI::Range(0, 1024));
  sub->add_option("--moe-min-mass", o.moe_min_mass,
                  "Per token and layer, compute the chosen experts in gate order until their share of the chosen gate weight reaches "
                  "P (at least one; 1: all). Lossy: price it with strata perplexity --kl-divergence")
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--route-cache", o.route_cache,
                  "J[,M]: per token and layer keep the router's top J experts and fill the other slots from its top M (default 2k) "
                  "preferring experts already in the expert cache, then by score (gate weights as the model computes them). Lossy: "
                  "price it with strata perplexity --kl-divergence")
      ->type_name("J[,M]");
  sub->add_option("--miss-model", o.miss_model,
                  "FILE.gguf: a low-bit copy of the model (same architecture and expert shapes; strata quantize --experts-only "
                  "writes one): an expert not in memory that no token chose among its first J (--route-cache's J, else 1) is "
                  "computed from this file's bytes instead of being read into the expert cache. Lossy: price it with strata "
                  "perplexity --kl-divergence")
      ->type_name("FILE");
  sub->add_flag("--miss-admit", o.miss_admit,
                "With --miss-model: after an expert was computed from the low-bit copy, read the full expert into the expert cache "
                "in the background (as a prefetch: if the cache's policy admits it), so a later token that chooses it finds it in memory");
  sub->add_option("--quality-budget", o.quality_budget,
                  "KL: take the knob setting (--route-cache, --moe-min-mass, --moe-k) with the fewest expert bytes per token whose "
                  "mean KL divergence, as strata calibrate measured it, is at most KL; prints the choice. Not with those options. A "
                  "missing, malformed or other model's calibration file: a warning, and the knobs stay off")
      ->check(CLI::Range(0.0, 1e9));
  sub->add_option("--calibration", o.calibration,
                  "With --quality-budget: the calibration file (default: the one strata calibrate wrote beside the warm-start statistics)");
  sub->add_option("--io-depth", o.queue_depth, "Expert reads in flight")->check(CLI::Range(1, 4096));
  sub->add_option("--io", o.io, "Expert I/O: auto (io_uring + O_DIRECT when possible) or pread");
  sub->add_flag("--mlock", o.mlock, "Lock the expert cache in RAM");
  sub->add_flag("--no-warm-start", o.no_warm_start,
                "Streaming: do not fill the expert cache at start from the usage statistics of earlier runs (nor update them)");
  sub->add_flag("--load-wait", o.load_wait,
                "Resident models: read the whole file before the first token (default: decode at once, streaming experts until a background read ends)");
  sub->add_flag("--check-finite,!--no-check-finite", o.check_finite,
                "Check each pass's logits are finite; a NaN/Inf is an error naming the first layer and tensor that were not (default: on)");
  sub->add_option("--model-copy", o.model_copies,
                  "A byte-identical copy of -m (or of its first split part) on another drive, checked at start; streamed experts are "
                  "read from the drive with the fewest bytes in flight, and a drive whose reads fail leaves the rotation; repeatable");
  sub->add_option("--stats-dir", o.stats_dir, "Directory of the warm-start usage statistics (default $XDG_CACHE_HOME/strata or ~/.cache/strata)");
}

void add_ep_options(CLI::App* sub, ModelOptions& o) {
  sub->add_flag("--expert-parallel", o.expert_parallel,
                "Under mpirun: every rank opens its own copy of -m with its own --ram-budget and computes a shard of each MoE layer's "
                "routed experts; rank 0 runs the rest and prints the output (bit-identical to one process)");
  sub->add_option("--ep-timeout", o.ep.timeout_s, "--expert-parallel: seconds a rank may take to answer before the job ends with an error")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  sub->add_option("--ep-replicate", o.ep.replicate,
                  "--expert-parallel: fraction of each layer's hottest experts (by the usage statistics) on every rank, computed by rank 0")
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--numa", o.numa,
                  "NUMA nodes of this machine (libnuma): shard (each node computes its share of the routed experts with its own pinned "
                  "threads, expert cache bound to its memory and I/O queue; dense weights bound to node 0; bit-identical output), "
                  "interleave (dense weights' pages interleaved over the nodes), off (default)")
      ->check(CLI::IsMember({"off", "shard", "interleave"}));
  // Tests and experiments: a faked layout (NODE:CPUS;...; core/numa_topology.h), also $STRATA_NUMA_TOPOLOGY.
  sub->add_option("--numa-topology", o.numa_topology, "")->group("");
}

nlohmann::json finish_numa(const Loaded& l) {
  if (!l.numa) return nullptr;
  std::fprintf(stderr, "%s", l.numa->report().c_str());
  nlohmann::json nodes = nlohmann::json::array();
  for (const NumaNodeStats& x : l.numa->stats()) {
    const NumaNode& n = l.numa->topology().nodes[static_cast<size_t>(x.node)];
    nodes.push_back({{"node", x.node},           {"cpus", n.cpus},         {"mem_node", n.mem_node},     {"experts", x.experts},
                     {"expert_bytes", x.expert_bytes}, {"cache_bytes", x.cache_bytes}, {"hits", x.hits}, {"misses", x.misses},
                     {"bytes_read", x.bytes_read}, {"jobs", x.jobs},       {"pairs", x.pairs},           {"compute_s", x.compute_s},
                     {"io_wait_s", x.io_wait_s}, {"wait_s", x.wait_s}});
  }
  return {{"mode", "shard"}, {"source", l.numa->topology().source}, {"nodes", nodes}};
}

nlohmann::json finish_expert_parallel(std::unique_ptr<ExpertParallel>& ep) {
  if (!ep) return nullptr;
  const EpReport r = ep->stop();
  std::fprintf(stderr, "%s", r.describe().c_str());
  nlohmann::json ranks = nlohmann::json::array();
  for (const EpRankStats& x : r.per_rank)
    ranks.push_back({{"hits", x.hits},
                     {"misses", x.misses},
                     {"bytes_read", x.bytes_read},
                     {"jobs", x.jobs},
                     {"pairs", x.pairs},
                     {"compute_s", x.compute_s},
                     {"io_wait_s", x.io_wait_s},
                     {"net_wait_s", x.net_wait_s},
                     {"memory", {{"budget", x.budget}, {"dense", x.dense}, {"kv", x.kv}, {"scratch", x.scratch}, {"expert_cache", x.expert_cache},
                                 {"peak_rss", x.peak_rss}}}});
  const double dt = r.decode_tokens ? static_cast<double>(r.decode_tokens) : 1.0;
  return {{"ranks", r.ranks},
          {"per_rank", ranks},
          {"net_bytes", r.net_bytes},
          {"round_trips", r.round_trips},
          {"decode_tokens", r.decode_tokens},
          {"decode_bytes_per_token", r.decode_bytes / dt},
          {"decode_round_trips_per_token", r.decode_round_trips / dt},
          {"formula_bytes_per_token", r.formula_bytes},
          {"formula_round_trips_per_token", r.formula_round_trips},
          {"usage_formula_bytes_per_token", r.usage_formula ? nlohmann::json(r.usage_bytes) : nlohmann::json(nullptr)},
          {"usage_formula_round_trips_per_token", r.usage_formula ? nlohmann::json(r.usage_round_trips) : nlohmann::json(nullptr)}};
}

void add_sampling_options(CLI::App* sub, SamplerParams& p) {
  sub->add_option("--temp", p.temp, "Temperature (0: greedy, ties to the lowest id)")->check(CLI::Range(0.0, 1000.0));
  sub->add_option("--top-k", p.top_k, "Top-k (0: off)");
  sub->add_option("--top-p", p.top_p, "Top-p (1: off)")->check(CLI::Range(0.0, 1.0));
  sub->add_option("--min-p", p.min_p, "Min-p (0: off)")->check(CLI::Range(0.0, 1.0));
  sub->add_option("--repeat-penalty", p.repeat_penalty, "Repetition penalty (1: off)");
  sub->add_option("--repeat-last-n", p.repeat_last_n, "Tokens considered by the penalties (-1: all)")->check(CLI::Range(-1, 1 << 30));
  sub->add_option("--presence-penalty", p.presence_penalty, "Presence penalty");
  sub->add_option("--frequency-penalty", p.frequency_penalty, "Frequency penalty");
  sub->add_option("-s,--seed", p.seed, "Sampling seed");
}

GgmlType cache_type(const std::string& s) {
  if (s == "f32") return GgmlType::F32;
  if (s == "f16") return GgmlType::F16;
  if (s == "q8_0") return GgmlType::Q8_0;
  fail("unsupported cache type '{}' (f32, f16, q8_0)", s);
}

EngineOptions engine_shape(const ModelOptions& o, int n_seq) {
  EngineOptions eo;
  eo.n_ctx = o.n_ctx;
  eo.n_threads = o.n_threads;
  eo.n_batch = o.n_batch;
  eo.n_seq = n_seq;
  eo.type_k = cache_type(o.cache_type_k);
  eo.type_v = cache_type(o.cache_type_v);
  return eo;
}

EngineOptions engine_options(const ModelOptions& o) {
  EngineOptions eo = engine_shape(o, o.n_seq);
  if (!o.ram_budget.empty()) eo.tier.ram_budget = parse_bytes(o.ram_budget);
  eo.tier.cache_experts = o.cache_experts;
  eo.tier.policy = o.policy;
  eo.tier.lookahead = o.lookahead;
  eo.tier.queue_depth = o.queue_depth;
  STRATA_CHECK(o.io == "auto" || o.io == "pread", "--io must be auto or pread (got '{}')", o.io);
  eo.tier.force_pread = o.io == "pread";
  eo.tier.model_copies = o.model_copies;
  eo.tier.mlock = o.mlock;
  eo.tier.warm_start = !o.no_warm_start;
  eo.tier.stats_dir = o.stats_dir;
  eo.tier.load = o.load_wait ? LoadMode::Wait : LoadMode::Background;
  eo.tier.draft_bytes = o.draft_bytes;
  eo.nextn_kv = o.nextn_kv;
  eo.nextn_hidden_copy = o.nextn_hidden_copy;
  eo.routing_memory = o.routing_memory;
  eo.check_finite = o.check_finite;
  eo.logit_rows = o.logit_rows;
  return eo;
}

GpuChoice resolve_gpu(const std::string& spec) {
  GpuChoice g;
  const gpu::GpuRequest req = gpu::parse_gpu_option(spec);
  if (req.kind == gpu::GpuRequest::Kind::None) return g;
  g.is_auto = req.kind == gpu::GpuRequest::Kind::Auto;
  gpu::GpuSelection sel = gpu::select_gpu(req);
  if (!sel.device) std::fprintf(stderr, "%s\n", sel.note.c_str());
  g.device = std::move(sel.device);
  return g;
}

uint64_t parse_vram_budget(const std::string& s) {
  uint64_t b = 0;
  try {
    b = parse_bytes(s);
  } catch (const Error& e) {
    fail("--vram-budget: {}", e.what());
  }
  STRATA_CHECK(b > 0, "--vram-budget must be more than 0 (got '{}')", s);
  return b;
}

// --vram-experts: kVramExpertsAuto, 0 (off) or bytes.
int64_t parse_vram_experts(const std::string& s) {
  if (s == "auto") return kVramExpertsAuto;
  if (s == "off" || s == "0") return 0;
  uint64_t b = 0;
  try {
    b = parse_bytes(s);
  } catch (const Error& e) {
    fail("--vram-experts: {} (auto, off or a size)", e.what());
  }
  return static_cast<int64_t>(b);
}

void attach_gpu(GpuChoice g, Engine& eng, const ModelOptions& o) {
  if (!g.device) return;
  const std::string dev = g.device->info().summary();
  try {
    VramShape shape;
    shape.n_ctx = eng.kv().n_ctx();
    shape.n_seq = o.n_seq;
    shape.n_batch = eng.options().n_batch;
    shape.type_k = eng.options().type_k;
    shape.type_v = eng.options().type_v;
    shape.budget = o.vram_budget.empty() ? 0 : parse_vram_budget(o.vram_budget);
    shape.experts = parse_vram_experts(o.vram_experts);
    STRATA_CHECK(o.tiers == "exclusive" || o.tiers == "inclusive", "--tiers '{}': expected exclusive or inclusive (exclusive-demote is cachesim's alone)",
                 o.tiers);
    shape.tiers = parse_tier_mode(o.tiers);
    shape.expert_policy = o.policy;
    shape.pp = parse_pp_upload(o.vram_pp);
    try {
      shape.upload_per_pass = parse_bytes(o.vram_upload);
    } catch (const Error& e) {
      fail("--vram-upload: {}", e.what());
    }
    STRATA_CHECK(shape.upload_per_pass > 0, "--vram-upload must be more than 0 (got '{}')", o.vram_upload);
    VramPlan plan;
    auto ex = make_vulkan_executor(std::move(g.device), eng.model(), shape, &plan);
    plan.held = ex->device_memory().used;
    eng.model().set_executor(std::move(ex));
    eng.tier().set_vram(plan);
    if (VramExperts* v = eng.model().executor()->vram_experts())
      if (const int n = eng.tier().warm_vram(*v); n > 0) std::fprintf(stderr, "warm start: %d routed experts into VRAM first\n", n);
    const std::string cpu = plan.cpu_blocks.empty() ? "" : "; on the CPU: " + plan.cpu_blocks;
    const std::string tiers = plan.expert_slots > 0 ? fmt::format("; {} routed experts in VRAM ({}, {})", plan.expert_slots, format_bytes(plan.experts),
                                                               o.tiers)
                           : "";
    if (plan.gpu_layers == plan.n_layer) std::fprintf(stderr, "gpu: %s runs the layers%s%s\n", dev.c_str(), cpu.c_str(), tiers.c_str());
    else std::fprintf(stderr, "gpu: %s runs layers 0..%d of %d (%s)%s\n", dev.c_str(), plan.gpu_layers - 1, plan.n_layer, plan.note.c_str(), cpu.c_str());
  } catch (const Error& e) {
    if (!g.is_auto) throw;
    std::fprintf(stderr, "gpu auto: %s; running on the CPU\n", e.what());
  }
}

// --route-cache J[,M] against the model's k (k_max) and experts per layer (e_max).
static RouteCacheOptions parse_route_cache(const std::string& s, int k_max, int e_max) {
  RouteCacheOptions rc;
  const size_t comma = s.find(',');
  const auto num = [&](const std::string& t) {
    size_t used = 0;
    int v = -1;
    try {
      v = std::stoi(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    STRATA_CHECK(used == t.size() && !t.empty() && v >= 0, "--route-cache '{}': expected J or J,M (whole numbers)", s);
    return v;
  };
  rc.keep = num(s.substr(0, comma));
  rc.cands = comma == std::string::npos ? std::min(2 * k_max, e_max) : num(s.substr(comma + 1));
  STRATA_CHECK(rc.keep <= k_max, "--route-cache {}: J is at most the {} experts the model chooses per token", s, k_max);
  STRATA_CHECK(rc.cands >= k_max && rc.cands <= e_max, "--route-cache {}: M must be between the model's k ({}) and its experts per layer ({})", s,
               k_max, e_max);
  return rc;
}

// --moe-k / --moe-min-mass / --route-cache, checked against the model's experts per token.
void set_moe_knobs(const ModelOptions& o, Model& m) {
  MoeKnobs knobs;
  knobs.k = o.moe_k;
  knobs.min_mass = o.moe_min_mass;
  if (!knobs.active() && o.route_cache.empty()) return;
  int k_max = 0, e_max = 0;
  for (const LayerConfig& l : m.config().layers) k_max = std::max(k_max, l.n_expert_used), e_max = std::max(e_max, l.n_expert);
  STRATA_CHECK(k_max > 0, "--moe-k / --moe-min-mass / --route-cache: {} has no routed experts", o.path);
  if (!o.route_cache.empty()) knobs.route = parse_route_cache(o.route_cache, k_max, e_max);
  STRATA_CHECK(knobs.k <= k_max, "--moe-k {}: the model chooses {} experts per token", knobs.k, k_max);
  STRATA_CHECK(knobs.min_mass > 0.0f, "--moe-min-mass must be in (0, 1] (got {})", knobs.min_mass);
  m.set_moe_knobs(knobs);
}

void add_pp_options(CLI::App* sub, ModelOptions& o) {
  sub->add_option("--pp-model", o.pp_model,
                  "FILE.gguf: a low-bit copy of the model (as --miss-model): a prompt of at least --pp-min-tokens tokens is "
                  "evaluated with this file's routed experts wherever the expert is not in memory; decoding uses the model's own, "
                  "and the expert cache reads the prompt's most used experts when it ends (serve: a pass that holds a decoding row, "
                  "or a shorter prompt's, takes the model's own). Lossy: price it with strata perplexity "
                  "--kl-divergence (the scored tokens follow a context evaluated this way)")
      ->type_name("FILE");
  sub->add_option("--pp-min-tokens", o.pp_min_tokens, "With --pp-model: the shortest prompt it takes (default 512)")->check(CLI::Range(1, 1 << 30));
}

PromptPass::PromptPass(Loaded& l, int n_prompt, int min_tokens) : l_(l) {
  if (!l_.prompt_experts || n_prompt < min_tokens) return;
  l_.prompt_experts->set(true);
  on_ = true;
}

PromptPass::~PromptPass() {
  if (on_) l_.prompt_experts->set(false);
}

// --miss-model: the stand-in, checked against the model, between the model and its expert tier.
static void attach_standin(const std::string& path, Loaded& l) {
  Model& m = l.engine->model();
  l.standin = Model::load(path);
  check_standin_matches(m, *l.standin);
  const int keep = m.moe_knobs().route.on() ? m.moe_knobs().route.keep : 1;
  l.standin_experts = std::make_unique<StandInExperts>(*m.expert_provider(), *l.standin, keep);
  m.set_expert_provider(l.standin_experts.get());
  m.add_routing_observer(l.standin_experts.get());
}

// Whether the calibration's stand-in file is there and is the file it measured (else why not, in `why`).
static bool standin_usable(const Calibration& c, std::string* why) {
  if (c.miss_model.empty()) return false;
  try {
    const uint64_t key = model_identity(*GgufModel::open(c.miss_model));
    if (key == c.miss_model_key) return true;
    *why = fmt::format("the stand-in {} changed since it was calibrated: its settings are passed over", c.miss_model);
  } catch (const std::exception& e) {
    *why = fmt::format("the stand-in cannot be used ({}): its settings are passed over", e.what());
  }
  return false;
}

// --quality-budget: the calibrated setting that fits, applied as if given on the command line; a
// file that cannot be used (or a setting the model refuses) leaves the knobs off with a warning.
static QualityChoice apply_quality_budget(const ModelOptions& o, Model& m) {
  QualityChoice q;
  q.budget = o.quality_budget;
  const uint64_t key = model_identity(m.gguf());
  const std::string dir = o.stats_dir.empty() ? default_stats_dir() : o.stats_dir;
  q.file = !o.calibration.empty() ? o.calibration : dir.empty() ? std::string() : calibration_path(dir, key);
  std::optional<Calibration> c;
  if (q.file.empty()) q.why = "no statistics directory ($XDG_CACHE_HOME and $HOME unset): give --calibration FILE";
  else if (c = load_calibration(q.file, key, &q.why); !c && q.why.empty())
    q.why = fmt::format("{}: no calibration file (strata calibrate -m {} -f TEXT writes it)", q.file, o.path);
  if (c) {
    const bool standin_ok = standin_usable(*c, &q.note);
    if (const std::optional<size_t> i = choose_setting(*c, q.budget, standin_ok)) {
      q.setting = c->settings[*i];
      q.calibrated_ram_budget = c->ram_budget;
      if (q.setting.knobs.miss_model) q.standin = c->miss_model;
      const std::optional<size_t> with = choose_setting(*c, q.budget, true);
      if (standin_ok || !with || !c->settings[*with].knobs.miss_model) q.note.clear();  // the stand-in was not passed over
      ModelOptions mo = o;
      mo.moe_k = q.setting.knobs.moe_k;
      mo.moe_min_mass = q.setting.knobs.moe_min_mass;
      mo.route_cache = q.setting.knobs.route_cache;
      try {
        set_moe_knobs(mo, m);
        q.applied = true;
      } catch (const Error& e) {
        q.why = fmt::format("{}: setting '{}': {}", q.file, q.setting.knobs.name(), e.what());
        m.set_moe_knobs(MoeKnobs{});
      }
    } else {
      q.why = fmt::format("{}: no calibrated setting has a mean KL of at most {}", q.file, q.budget);
    }
  }
  std::fprintf(stderr, "%s\n", q.describe().c_str());
  const uint64_t budget = o.ram_budget.empty() ? 0 : parse_bytes(o.ram_budget);
  if (q.applied && budget != q.calibrated_ram_budget)
    std::fprintf(stderr, "note: this run has %s, the calibration %s: expect other bytes per token\n",
                 budget ? ("--ram-budget " + format_bytes(budget)).c_str() : "no --ram-budget",
                 q.calibrated_ram_budget ? ("--ram-budget " + format_bytes(q.calibrated_ram_budget)).c_str() : "none");
  return q;
}

// --pp-model: a stand-in with no protected choices, inactive until a long prompt (PromptPass).
static void attach_pp(const std::string& path, int min_tokens, Loaded& l) {
  Model& m = l.engine->model();
  l.pp = Model::load(path);
  check_standin_matches(m, *l.pp, "--pp-model");
  l.pp_experts = std::make_unique<StandInExperts>(*m.expert_provider(), *l.pp, 0);
  l.prompt_experts = std::make_unique<PromptExperts>(*l.pp_experts, l.engine->tier(), min_tokens);
  m.set_expert_provider(l.pp_experts.get());
  m.add_routing_observer(l.pp_experts.get());
}

void add_knob_figures(const Loaded& l, nlohmann::json& j) {
  const Model& m = l.engine->model();
  const MoeKnobs& knobs = m.moe_knobs();
  j["moe_knobs"] = {{"k", knobs.k}, {"min_mass", knobs.min_mass}};
  if (knobs.route.on()) {
    const RouteCacheCounters& rc = m.route_counters();
    j["moe_knobs"]["route_cache"] = {{"keep", knobs.route.keep}, {"cands", knobs.route.cands}, {"slots", rc.slots.load()},
                                     {"changed", rc.changed.load()}, {"route_agreement", rc.agreement()}};
  }
  if (l.quality) j["moe_knobs"]["quality_budget"] = quality_choice_json(*l.quality);
  if (l.standin_experts)
    j["miss_model"] = {{"experts", l.standin_experts->counters().experts.load()}, {"bytes", l.standin_experts->counters().bytes.load()},
                       {"admits", l.standin_experts->counters().admits.load()}};
  if (l.pp_experts) j["pp_model"] = {{"experts", l.pp_experts->counters().experts.load()}, {"bytes", l.pp_experts->counters().bytes.load()}};
}

// --quality-budget picks the knobs itself: given with any of them, it is refused.
static void check_quality_budget_alone(const ModelOptions& o) {
  STRATA_CHECK(o.calibration.empty() || o.quality_budget >= 0, "--calibration {}: give --quality-budget KL too (the file is read only for it)", o.calibration);
  if (o.quality_budget < 0) return;
  std::string given;
  if (o.moe_k != 0) given += fmt::format(" --moe-k {}", o.moe_k);
  if (o.moe_min_mass != 1.0f) given += fmt::format(" --moe-min-mass {}", o.moe_min_mass);
  if (!o.route_cache.empty()) given += " --route-cache " + o.route_cache;
  if (!o.miss_model.empty()) given += " --miss-model " + o.miss_model;
  STRATA_CHECK(given.empty(), "--quality-budget chooses --route-cache / --moe-min-mass / --moe-k from the calibration file: not with{}", given);
}

// Issue 37's knobs on a loaded engine: the quality budget's setting or the explicit ones, the
// stand-in (--miss-model's, or the one the budget's setting was calibrated with) with --miss-admit,
// and --pp-model's copy.
static void attach_knobs(const ModelOptions& o, Loaded& l) {
  if (o.quality_budget >= 0) l.quality = apply_quality_budget(o, l.engine->model());
  else set_moe_knobs(o, l.engine->model());
  const std::string standin = !o.miss_model.empty() ? o.miss_model : l.quality ? l.quality->standin : std::string();
  STRATA_CHECK(!o.miss_admit || !standin.empty(), "--miss-admit needs --miss-model FILE");
  if (!standin.empty()) attach_standin(standin, l);
  if (l.standin_experts) l.standin_experts->set_admit(o.miss_admit);
  if (!o.pp_model.empty()) attach_pp(o.pp_model, o.pp_min_tokens, l);
}

// A rank other than 0 under --expert-parallel: a routed-only engine (no KV cache, no dense weights in
// its plan or its memory) with the options that shape its expert tier, then rank 0's jobs until it
// stops them. Never returns.
// model_heap: what loading the model left on the heap (its metadata as read: the vocabulary's
// strings among them), planned as the vocabulary is on rank 0.
[[noreturn]] static void serve_expert_shard(const ModelOptions& o, std::unique_ptr<Model> model, GpuChoice gpu, uint64_t model_heap) {
  STRATA_CHECK(!gpu.device, "--expert-parallel computes routed experts on the CPUs of the ranks: not with --gpu");
  ModelOptions mo = o;
  mo.no_warm_start = true;  // as on rank 0 (load_engine)
  mo.draft_bytes = 0;
  EngineOptions eo = engine_options(mo);
  eo.n_seq = 1;
  eo.routed_only = true;
  eo.tier.vocab_bytes = model_heap;
  int k_max = 1;
  for (const auto& lc : model->config().layers) k_max = std::max(k_max, lc.n_expert_used);
  eo.tier.request_bytes = ep_shard_buffers(eo.n_batch, k_max, model->config().n_embd).total();  // its job and answer buffers
  Loaded l;
  l.engine = std::make_unique<Engine>(std::move(model), eo);
  attach_knobs(o, l);  // as on rank 0: its shard computes what one process's would
  l.ep = ExpertParallel::start(*l.engine, o.ep);
  STRATA_CHECK(!l.ep->root(), "expert parallelism: rank 0 cannot be a shard server");
  std::fprintf(stderr, "rank %d: %s\n", l.ep->rank(), l.engine->tier().plan().describe().c_str());
  std::exit(l.ep->serve());
}

Loaded load_engine(const ModelOptions& o) {
  if (o.isa != "auto") select_isa(parse_isa(o.isa.c_str()));
  select_gemm_backend(parse_gemm_backend(o.gemm.c_str()));
  install_interrupt_handler();
  check_quality_budget_alone(o);
  GpuChoice gpu = resolve_gpu(o.gpu);  // a loader or device problem of --gpu vulkan fails before the model loads
  Loaded l;
  const NumaMode numa = parse_numa_mode(o.numa);
  NumaTopology topo;
  if (numa != NumaMode::Off) {
    STRATA_CHECK(!o.expert_parallel, "--numa {}: not with --expert-parallel (each rank is one process; pin ranks with mpirun instead)", o.numa);
    STRATA_CHECK(!gpu.device, "--numa {}: routed experts are computed on the CPUs of the nodes: not with --gpu", o.numa);
    STRATA_CHECK(o.miss_model.empty(), "--numa {}: not with --miss-model", o.numa);
    STRATA_CHECK(o.pp_model.empty(), "--numa {}: not with --pp-model", o.numa);
    topo = resolve_numa_topology(o.numa_topology);  // throws without libnuma, or naming a bad spec
  } else {
    STRATA_CHECK(o.numa_topology.empty(), "--numa-topology needs --numa shard or --numa interleave");
  }
  // --expert-parallel on a rank other than 0: a shard server, whose engine holds no dense weights
  // and no KV cache (EngineOptions::routed_only); it serves rank 0's jobs and exits here.
  const bool shard = o.expert_parallel && expert_parallel_rank() != 0;
  const uint64_t heap_before_model = heap_in_use();
  auto model = Model::load(o.path);
  for (const std::string& copy : o.model_copies) checked_model_copy(model->gguf(), copy);  // refused now, streaming or not
  if (shard) serve_expert_shard(o, std::move(model), std::move(gpu), heap_in_use() - std::min(heap_in_use(), heap_before_model));
  EpPlan numa_plan;
  if (numa == NumaMode::Shard) numa_plan = plan_for_model(*model, topo.size(), 0, o.stats_dir);
  const uint64_t heap0 = heap_in_use();
  l.tokenizer = tok::Tokenizer::from_gguf(model->gguf());
  const uint64_t request_bytes = o.before_engine ? o.before_engine(*model, *l.tokenizer) : 0;
  const uint64_t heap1 = heap_in_use();
  ModelOptions mo = o;
  // --expert-parallel: no warm start on any rank (a rank's cache would fill with other shards'
  // experts, and rank 0's counts would record only its own shard); the plan reads the statistics.
  if (o.expert_parallel) mo.no_warm_start = true;
  // --numa shard: the same (node 0's cache holds node 0's share), and node 0's threads on its CPUs.
  if (numa == NumaMode::Shard) {
    mo.no_warm_start = true;
    if (mo.n_threads <= 0) mo.n_threads = static_cast<int>(topo.nodes[0].pin_cpus.size());
  }
  if (!o.draft_model.empty()) {  // the draft against the target's vocabulary, its memory in the target's plan
    const std::unique_ptr<tok::Vocab> target_vocab = tok::Vocab::from_gguf(model->gguf());
    l.draft = load_draft_engine(o.draft_model, o.path, *target_vocab, engine_shape(o, o.draft_seq));
    mo.draft_bytes = draft_plan_bytes(*l.draft);
  }
  EngineOptions eo = engine_options(mo);
  eo.tier.vocab_bytes = heap1 > heap0 ? heap1 - heap0 : 0;
  eo.tier.request_bytes = request_bytes;
  if (numa == NumaMode::Shard) eo.tier.cache_share = share_of_node(numa_plan, 0);
  l.engine = std::make_unique<Engine>(std::move(model), eo);
  uint64_t dense = 0;
  if (numa != NumaMode::Off) dense = numa_place_dense(l.engine->model(), topo, numa);
  if (numa == NumaMode::Interleave)
    std::fprintf(stderr, "numa interleave: %s\n  dense weights %s interleaved over the nodes' memory\n", topo.describe().c_str(), format_bytes(dense).c_str());
  if (numa == NumaMode::Shard) {
    l.numa = std::make_unique<NumaShards>(*l.engine, topo, std::move(numa_plan));
    std::fprintf(stderr, "%s  dense weights %s bound to node 0's memory (not replicated)\n", l.numa->describe().c_str(), format_bytes(dense).c_str());
  }
  attach_knobs(o, l);
  attach_gpu(std::move(gpu), *l.engine, o);
  if (o.expert_parallel) {
    STRATA_CHECK(!l.engine->model().executor(), "--expert-parallel computes routed experts on the CPUs of the ranks: not with --gpu");
    l.ep = ExpertParallel::start(*l.engine, o.ep);
    if (!l.ep->root()) std::exit(l.ep->serve());  // a shard server: its whole life is here
    std::fprintf(stderr, "%s", l.ep->plan().describe().c_str());
  }
  return l;
}

nlohmann::json memory_json(const MemoryPlan& mp) {
  return {{"budget", mp.budget},   {"dense", mp.dense},       {"kv", mp.kv},           {"scratch", mp.scratch},
          {"draft", mp.draft},     {"logits", mp.logits},     {"vocab", mp.vocab},     {"requests", mp.requests},
          {"expert_cache", mp.expert_cache}, {"planned", mp.total()}, {"streaming", mp.streaming}, {"peak_rss", process_peak_rss()}};
}

nlohmann::json vram_json(Engine& eng) {
  const LayerExecutor* ex = eng.model().executor();
  const VramPlan& p = eng.tier().plan().vram;
  if (!ex || !p.planned) return nullptr;
  const DeviceMemory m = ex->device_memory();
  return {{"device", p.device},   {"budget", p.budget},       {"weights", p.weights},   {"kv", p.kv},
          {"scratch", p.scratch}, {"planned", p.total()},     {"used", m.used},         {"peak", m.peak},
          {"gpu_layers", p.gpu_layers}, {"n_layer", p.n_layer}, {"kv_type_k", ggml_type_name(p.type_k)}, {"kv_type_v", ggml_type_name(p.type_v)}};
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  STRATA_CHECK(f.good(), "{}: cannot open", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string tier_summary(Engine& eng, int n_tokens, double seconds) {
  ExpertCache* c = eng.tier().cache();
  const MemoryPlan& plan = eng.tier().plan();
  std::string s = plan.describe() + "\n";
  if (plan.vram.planned) {
    const LayerExecutor* ex = eng.model().executor();
    s += plan.vram.describe() + fmt::format("; device memory held {} (peak {})\n", format_bytes(ex ? ex->device_memory().used : 0),
                                            format_bytes(ex ? ex->device_memory().peak : 0));
  }
  s += fmt::format("memory: peak RSS {} (budget {})\n", format_bytes(process_peak_rss()), plan.budget ? format_bytes(plan.budget) : "none");
  if (!c) return s;
  const auto& k = c->counters();
  const double acc = static_cast<double>(k.hits + k.misses);
  const double per_tok = n_tokens > 0 ? static_cast<double>(k.bytes_read) / n_tokens : 0;
  const double bw = k.wait_s > 0 ? static_cast<double>(k.bytes_read) / seconds : 0;
  s += fmt::format("experts: {} policy, hit rate {:.1f}% ({} hits, {} misses, {} not admitted), read {} ({} per token, {:.2f} GB/s over the run), "
                   "I/O wait {:.2f} s of {:.2f} s ({:.0f}%)",
                   c->policy_name(), acc > 0 ? 100.0 * k.hits / acc : 0.0, k.hits, k.misses, k.transient, format_bytes(k.bytes_read),
                   format_bytes(static_cast<uint64_t>(per_tok)), bw / 1e9, k.wait_s, seconds, seconds > 0 ? 100.0 * k.wait_s / seconds : 0.0);
  if (const auto d = c->drive_bytes(); !d.empty()) {
    s += "\ndrives (--model-copy): read";
    for (size_t i = 0; i < d.size(); ++i) s += fmt::format("{} {}", i ? "," : "", format_bytes(d[i]));
  }
  if (k.warm_issued || plan.warm_queued)
    s += fmt::format("\nwarm start: {} experts ranked by earlier runs, {} read into the cache, {} of them used", plan.warm_queued, k.warm_issued, k.warm_used);
  if (k.prefetch_issued)
    s += fmt::format("\nprefetch: {} issued, precision {:.1f}% (used), recall {:.1f}% of misses+prefetched hits", k.prefetch_issued,
                     100.0 * k.prefetch_used / k.prefetch_issued,
                     100.0 * k.demand_prefetched / std::max<double>(1.0, static_cast<double>(k.misses + k.demand_prefetched)));
  return s;
}

std::string layer_profile(Engine& eng, int n_tokens) {
  std::string s;
  const auto& ls = eng.model().layer_seconds();
  ExpertCache* c = eng.tier().cache();
  const LayerExecutor* ex = eng.model().executor();
  const DeviceStats ds = ex ? ex->stats() : DeviceStats{};
  const double nt = std::max(1, n_tokens), ms = 1000.0 / nt;
  for (size_t l = 0; l < ls.size(); ++l) {
    const double wait = c ? c->layer_prof()[l].wait_s : 0.0;
    s += fmt::format("[PROF] layer={} wait={:.2f}ms compute={:.2f}ms", l, ms * wait, ms * (ls[l] - wait));
    if (l < ds.layers.size()) {
      const DeviceLayerTimes& t = ds.layers[l];
      s += fmt::format(" gpu={:.2f}ms cpu={:.2f}ms bus={:.2f}ms gpu_idle={:.2f}ms", ms * t.gpu_s, ms * t.cpu_s, ms * t.bus_s,
                       ms * std::max(0.0, t.wall_s - t.gpu_s));
    }
    if (c) s += fmt::format(" hits={} misses={} read={}", c->layer_prof()[l].hits, c->layer_prof()[l].misses, format_bytes(c->layer_prof()[l].bytes_read));
    s += "\n";
  }
  return s;
}

nlohmann::json device_json(Engine& eng, int n_tokens, double wall_s) {
  const LayerExecutor* ex = eng.model().executor();
  if (!ex) return nullptr;
  return device_report_json(*ex, std::max(1, n_tokens), wall_s);
}

std::string device_line(Engine& eng, int n_tokens, double wall_s) {
  const LayerExecutor* ex = eng.model().executor();
  if (!ex) return "";
  const DeviceStats d = ex->stats();
  const double nt = std::max(1, n_tokens);
  std::string busy = d.timestamps ? fmt::format("device busy {:.2f} s, {:.0f}% of {:.2f} s", d.gpu_s, wall_s > 0 ? 100.0 * d.gpu_s / wall_s : 0.0, wall_s)
                                  : std::string("device time not measured (its queue has no timestamps)");
  std::string line = fmt::format("gpu: {}, {} layers: bus {} up + {} down per token; {}; CPU blocks and routed experts {:.2f} s; copies {:.2f} s",
                                 ex->name(), ex->n_layers(), format_bytes(static_cast<uint64_t>(static_cast<double>(d.bytes_up) / nt)),
                                 format_bytes(static_cast<uint64_t>(static_cast<double>(d.bytes_down) / nt)), busy, d.cpu_s, d.bus_s);
  const DeviceExpertStats& e = d.experts;
  if (e.slots > 0)
    line += fmt::format("; VRAM experts ({}, {} of {} slots): {:.1f}% of uses, {:.2f} uploads ({}) per token, {:.2f} s uploading", e.tiers, e.resident,
                        e.slots, 100.0 * e.hit_rate(), static_cast<double>(e.uploads) / nt,
                        format_bytes(static_cast<uint64_t>(static_cast<double>(e.upload_bytes) / nt)), e.upload_s);
  return line;
}

namespace {
std::atomic<int> g_interrupts{0};
void on_sigint(int) {
  if (g_interrupts.fetch_add(1) >= 1) _exit(130);
}
}  // namespace

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
}
bool interrupted() { return g_interrupts.load() > 0; }
void clear_interrupt() { g_interrupts.store(0); }

}  // namespace strata::cli
