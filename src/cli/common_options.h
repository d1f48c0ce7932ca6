#pragma once
// Options shared by run / chat / serve / bench: model loading, threads, KV cache, sampling.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "gpu/device.h"
#include "model/standin_experts.h"
#include "runtime/calibration.h"
#include "runtime/engine.h"
#include "runtime/expert_parallel.h"
#include "runtime/numa_shards.h"
#include "runtime/prompt_experts.h"
#include "runtime/sampler.h"
#include "tokenizer/tokenizer.h"

namespace strata::cli {

struct ModelOptions {
  std::string path;
  int n_ctx = 4096;
  int n_threads = 0;
  int n_batch = 512;
  int n_seq = 1;  // KV sequence slots (serve sets it from --parallel; not a CLI option here)
  std::string cache_type_k = "f16", cache_type_v = "f16";
  std::string isa = "auto";
  std::string gemm = "int8";  // prompt-size products: int8 (llama.cpp's arithmetic) or blas
  std::string gpu = "none";   // --gpu auto|none|vulkan[:N] (gpu/device.h)
  std::string vram_budget;    // --vram-budget: "" = the device's device-local heap less a reserve (model/vram_plan.h)
  std::string vram_experts = "auto";  // --vram-experts auto|off|SIZE: routed experts in VRAM (model/vram_experts.h)
  std::string tiers = "exclusive";    // --tiers exclusive|inclusive
  std::string vram_upload = "64M";    // --vram-upload: promotions uploaded per pass
  std::string vram_pp = "auto";       // --vram-pp auto|always|off: prompt experts uploaded for a pass by cost
  // Expert tier
  std::string ram_budget;
  int64_t cache_experts = 0;
  std::string policy = "default";
  int lookahead = 1;
  int moe_k = 0;               // MoeKnobs (model/model.h): --moe-k, --moe-min-mass
  float moe_min_mass = 1.0f;
  std::string route_cache;     // --route-cache J[,M] (model/route_cache.h); "": off
  std::string miss_model;      // --miss-model FILE (model/standin_experts.h); "": off
  bool miss_admit = false;     // --miss-admit: read the full expert in the background after its stand-in was used
  std::string pp_model;        // --pp-model FILE: long prompts' routed experts from a low-bit file; "": off
  int pp_min_tokens = 512;     // --pp-min-tokens: the shortest prompt --pp-model takes
  double quality_budget = -1;  // --quality-budget KL (runtime/calibration.h); < 0: off
  std::string calibration;     // --calibration FILE ("": beside the warm-start statistics)
  int queue_depth = 64;
  std::string io = "auto";
  bool mlock = false;
  bool no_warm_start = false;
  bool load_wait = false;
  std::string stats_dir;
  std::vector<std::string> model_copies;  // --model-copy (repeatable)
  bool check_finite = true;
  // --expert-parallel (under mpirun): routed experts sharded across the job's ranks.
  bool expert_parallel = false;
  EpOptions ep;
  // --numa shard|interleave|off (runtime/numa_shards.h); --numa-topology (hidden): a faked layout.
  std::string numa = "off";
  std::string numa_topology;
  // Drafting (set by the commands, not CLI options here): a draft model (-md FILE) with draft_seq
  // slots, loaded by load_engine after the target model (whose vocabulary it must share) and before
  // the target's engine, whose memory plan counts what it holds (draft_bytes, set then); the
  // engine's per-slot NextN KV rows for --draft mtp.
  std::string draft_model;
  int draft_seq = 1;
  uint64_t draft_bytes = 0;
  bool nextn_kv = false;
  bool nextn_hidden_copy = false;  // serve --draft mtp: the drafter's copy of the hidden rows
  bool routing_memory = false;     // speculation with predicted routing (EngineOptions::routing_memory)
  int logit_rows = 0;              // EngineOptions::logit_rows (0: one per slot)
  // Called with the model and its tokenizer before the engine is made; the heap it holds after
  // counts with the vocabulary (serve builds the grammar index here) and it returns
  // TierOptions::request_bytes (serve: request handling).
  std::function<uint64_t(const Model&, const tok::Tokenizer&)> before_engine;
};

void add_model_options(CLI::App* sub, ModelOptions& o);
void add_sampling_options(CLI::App* sub, SamplerParams& p);
// --expert-parallel, --ep-timeout, --ep-replicate, --numa, --numa-topology (run, bench, perplexity, serve).
void add_ep_options(CLI::App* sub, ModelOptions& o);
// The end of an expert-parallel job on rank 0 (nothing without one): stops the other ranks,
// prints their figures to stderr and returns them as JSON (null without one).
nlohmann::json finish_expert_parallel(std::unique_ptr<ExpertParallel>& ep);
// The end of a --numa shard run (nothing without one): prints each node's figures to stderr and
// returns them as JSON ({"nodes": [...]}; null without one).
nlohmann::json finish_numa(const struct Loaded& l);

// The one place EngineOptions are built from the command line: the shape (context, batch, threads,
// slots, cache types) alone (a draft model's engine), or with the expert tier and what the command
// set (the target's).
EngineOptions engine_shape(const ModelOptions& o, int n_seq);
EngineOptions engine_options(const ModelOptions& o);

struct Loaded {
  // --miss-model: the stand-in model and the provider between the engine's model and its expert
  // tier (declared first: they outlive the engine, whose model points at them).
  std::unique_ptr<Model> standin;
  std::unique_ptr<StandInExperts> standin_experts;
  // --pp-model: the same for long prompts (active only while one is evaluated: PromptPass).
  std::unique_ptr<Model> pp;
  std::unique_ptr<StandInExperts> pp_experts;
  std::unique_ptr<Engine> engine;
  // --pp-model's switch over pp_experts (runtime/prompt_experts.h): PromptPass, or the server's scheduler per pass.
  std::unique_ptr<PromptExperts> prompt_experts;
  std::unique_ptr<tok::Tokenizer> tokenizer;
  std::unique_ptr<Engine> draft;  // ModelOptions::draft_model's engine, or null
  // --numa shard: the other nodes' shards (before the engine goes).
  std::unique_ptr<NumaShards> numa;
  // --expert-parallel: the job (rank 0; the other ranks serve inside load_engine and exit there).
  // Last, so that it leaves the job before the engine goes.
  std::unique_ptr<ExpertParallel> ep;
  // --quality-budget: the setting chosen from the calibration file, or why none was (knobs off).
  std::optional<QualityChoice> quality;
};
Loaded load_engine(const ModelOptions& o);

// --pp-model for one prompt: a prompt of at least --pp-min-tokens tokens is evaluated (while this
// lives) with the routed experts of the low-bit file that are not in memory; when it ends, the
// experts it computed from that file go to the expert cache's warm fill (most used first; free
// slots only, read beside decoding), so decoding starts with them. Nothing without --pp-model.
class PromptPass {
 public:
  PromptPass(Loaded& l, int n_prompt, int min_tokens);
  ~PromptPass();
  PromptPass(const PromptPass&) = delete;
  PromptPass& operator=(const PromptPass&) = delete;
  bool active() const { return on_; }

 private:
  Loaded& l_;
  bool on_ = false;
};
// The --pp-model options (run, bench, perplexity, serve).
void add_pp_options(CLI::App* sub, ModelOptions& o);
// --json figures of issue 37's knobs: j["moe_knobs"] (k, min_mass; route_cache's J, M, choices,
// changed choices and route agreement when it is on) and j["miss_model"] (stand-in experts and
// their bytes) when --miss-model is given; with --quality-budget, j["moe_knobs"]["quality_budget"]
// (what it chose, or why it chose nothing).
void add_knob_figures(const Loaded& l, nlohmann::json& j);
// --gpu: `none` gives no device; `auto` a discrete GPU or none, printing one line saying why;
// `vulkan[:N]` the device, or throws naming why it cannot be opened.
struct GpuChoice {
  std::unique_ptr<gpu::Device> device;
  bool is_auto = false;
};
GpuChoice resolve_gpu(const std::string& spec);
// Puts the device's executor under the engine's model (model/vulkan_executor.h), with KV rows for
// n_seq sequences in the engine's cache types, scratch for its batch size, and the leading layers
// that fit --vram-budget (the plan goes into the engine's memory plan: MemoryPlan::vram). What the
// executor does not run (the architecture, a weight type, a KV type) or a budget that holds no
// layer throws for `vulkan` and, for `auto`, prints one line and leaves the model on the CPU.
// With --vram-experts (auto: what the layers leave of the budget) the routed experts the device's
// layers use get a VRAM cache (--tiers, --vram-upload, the expert cache's --cache-policy).
void attach_gpu(GpuChoice g, Engine& eng, const ModelOptions& o);
// --vram-budget's value in bytes (throws naming the option).
uint64_t parse_vram_budget(const std::string& s);
// A KV cache type by name (f32, f16, q8_0).
GgmlType cache_type(const std::string& s);

// The memory plan's figures and the peak RSS, for --json.
nlohmann::json memory_json(const MemoryPlan& mp);
// The VRAM plan and the device's count of what it holds, for --json ("vram"); null without a
// device executor.
nlohmann::json vram_json(Engine& eng);

std::string read_file_bytes(const std::string& path);

// End-of-run figures of the expert tier (hit rate, bytes per token, bandwidth, memory); empty
// when experts are resident.
std::string tier_summary(Engine& eng, int n_tokens, double seconds);
// The device's figures since its last reset_stats() (null without --gpu): bytes over the bus per
// token each way, the device's busy time and its share of `wall_s` (the passes' time as the caller
// measured it), the CPU's expert time and the copies' time. One line for reports, or JSON.
nlohmann::json device_json(Engine& eng, int n_tokens, double wall_s);
std::string device_line(Engine& eng, int n_tokens, double wall_s);
// --prof: per-layer I/O wait vs compute per token since the last reset; with --gpu, per layer the
// device runs, its device, CPU, copy and device-idle times.
std::string layer_profile(Engine& eng, int n_tokens);

// Ctrl-C handling: the first SIGINT sets the flag (generation stops), a second one exits.
void install_interrupt_handler();
bool interrupted();
void clear_interrupt();

}  // namespace strata::cli
