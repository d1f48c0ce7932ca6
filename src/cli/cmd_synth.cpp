// strata synth --preset NAME [--recipe MIX] --out FILE [--layers N] [--experts N] [--expert-type q4_K] [--skew S] [--seed N] ...
#include <fmt/format.h>

#include <memory>
#include <optional>

#include "cli/commands.h"
#include "core/error.h"
#include "core/units.h"
#include "synth/synth.h"

namespace strata::cli {
namespace {

struct SynthOptions {
  std::string preset = "demo";
  std::string recipe;
  std::string out;
  std::string name;
  int threads = 0;
  bool no_chat_template = false;
  std::optional<int> layers, embd, heads, kv_heads, head_dim, experts, experts_used, expert_ffn, ffn, shared, dense_layers, vocab, ctx;
  std::optional<int> q_lora, kv_lora, qk_rope, idx_heads, idx_dim, idx_topk;
  std::optional<std::string> expert_type, expert_down_type, attn_type, embd_type, output_type, shexp_type;
  std::optional<double> skew;
  std::optional<float> yarn_log_mul;
  std::optional<uint64_t> seed;
};

GgmlType parse_type(const std::string& s, const char* flag) {
  auto t = ggml_type_from_name(s);
  STRATA_CHECK(t.has_value(), "{}: unknown ggml type '{}'", flag, s);
  return *t;
}

template <typename T>
void over(T& field, const std::optional<T>& v) {
  if (v) field = *v;
}

SynthSpec make_spec(const SynthOptions& o) {
  SynthSpec s = synth_preset(o.preset);
  if (!o.recipe.empty()) synth_apply_recipe(s, o.recipe);
  over(s.n_layer, o.layers);
  over(s.n_embd, o.embd);
  over(s.n_head, o.heads);
  over(s.n_head_kv, o.kv_heads);
  over(s.head_dim, o.head_dim);
  over(s.n_expert, o.experts);
  over(s.n_expert_used, o.experts_used);
  over(s.n_ff_exp, o.expert_ffn);
  over(s.n_ff, o.ffn);
  over(s.n_shared, o.shared);
  over(s.n_dense_lead, o.dense_layers);
  over(s.n_vocab, o.vocab);
  s.chat_template = !o.no_chat_template;
  over(s.n_ctx, o.ctx);
  over(s.q_lora, o.q_lora);
  over(s.kv_lora, o.kv_lora);
  over(s.qk_rope, o.qk_rope);
  over(s.idx_heads, o.idx_heads);
  over(s.idx_dim, o.idx_dim);
  over(s.idx_topk, o.idx_topk);
  over(s.yarn_log_mul, o.yarn_log_mul);
  over(s.skew, o.skew);
  over(s.seed, o.seed);
  if (o.expert_type) s.expert_type = parse_type(*o.expert_type, "--expert-type");
  if (o.expert_down_type) s.expert_down_type = parse_type(*o.expert_down_type, "--expert-down-type");
  if (o.attn_type) s.attn_type = parse_type(*o.attn_type, "--attn-type");
  if (o.embd_type) s.embd_type = parse_type(*o.embd_type, "--embd-type");
  if (o.output_type) s.output_type = parse_type(*o.output_type, "--output-type");
  if (o.shexp_type) s.shexp_type = parse_type(*o.shexp_type, "--shexp-type");
  if (!o.name.empty()) s.name = o.name;
  s.validate();
  return s;
}

}  // namespace

Command add_synth(CLI::App& app) {
  auto o = std::make_shared<SynthOptions>();
  auto* sub = app.add_subcommand("synth", "Write a random-weight GGUF with the exact shape of a real MoE model (loadable by Strata and llama.cpp)");
  std::string presets;
  for (const auto& p : synth_preset_names()) presets += (presets.empty() ? "" : ", ") + p;
  sub->add_option("--preset", o->preset, "Model shape: " + presets)->capture_default_str();
  std::string recipes;
  for (const auto& r : synth_recipe_names()) recipes += (recipes.empty() ? "" : ", ") + r;
  sub->add_option("--recipe", o->recipe, "Per-tensor type mix over the shape (like the low-bit files people download): " + recipes);
  sub->add_option("--out", o->out, "Output GGUF file (written to a temporary name, then renamed)")->required();
  sub->add_option("--name", o->name, "general.name");
  sub->add_option("--layers", o->layers, "Number of layers");
  sub->add_option("--embd", o->embd, "Embedding width (multiple of 256)");
  sub->add_option("--heads", o->heads, "Attention heads");
  sub->add_option("--kv-heads", o->kv_heads, "KV heads (GQA)");
  sub->add_option("--head-dim", o->head_dim, "Head dimension (GQA)");
  sub->add_option("--experts", o->experts, "Routed experts per MoE layer");
  sub->add_option("--experts-used", o->experts_used, "Experts selected per token");
  sub->add_option("--expert-ffn", o->expert_ffn, "Hidden size of one routed expert");
  sub->add_option("--ffn", o->ffn, "Hidden size of the dense FFN");
  sub->add_option("--shared", o->shared, "Shared experts (deepseek2, glm4moe)");
  sub->add_option("--dense-layers", o->dense_layers, "Leading dense layers (deepseek2, glm4moe)");
  sub->add_option("--q-lora", o->q_lora, "q LoRA rank, 0 = plain attn_q (deepseek2)");
  sub->add_option("--kv-lora", o->kv_lora, "kv LoRA rank (deepseek2)");
  sub->add_option("--qk-rope", o->qk_rope, "Rotated dims of an MLA q/k head (deepseek2, deepseek32)");
  sub->add_option("--idx-heads", o->idx_heads, "Lightning indexer heads (deepseek32)");
  sub->add_option("--idx-dim", o->idx_dim, "Lightning indexer head size (deepseek32; llama.cpp needs a power of two >= 64)");
  sub->add_option("--idx-topk", o->idx_topk, "Positions the lightning indexer keeps per query (deepseek32)");
  sub->add_option("--yarn-log-mul", o->yarn_log_mul, "rope.scaling.yarn_log_multiplier (0.1 x mscale_all_dim) of YaRN presets");
  sub->add_option("--vocab", o->vocab, "Vocabulary size");
  sub->add_flag("--no-chat-template", o->no_chat_template, "Write no tokenizer.chat_template (chat and serve then use ChatML)");
  sub->add_option("--ctx", o->ctx, "Training context length (metadata)");
  sub->add_option("--expert-type", o->expert_type, "Routed expert weight type (e.g. q4_K, q6_K, q8_0, iq2_xxs, iq1_s, tq1_0, f16)");
  sub->add_option("--expert-down-type", o->expert_down_type, "Routed ffn_down_exps type (default: --expert-type)");
  sub->add_option("--shexp-type", o->shexp_type, "Shared-expert / dense FFN weight type");
  sub->add_option("--attn-type", o->attn_type, "Attention weight type");
  sub->add_option("--embd-type", o->embd_type, "token_embd type (q4_K, q6_K, q8_0, q4_0, f16, f32)");
  sub->add_option("--output-type", o->output_type, "output weight type");
  sub->add_option("--skew", o->skew, "Router popularity skew: 0 uniform, 1 Zipf-like");
  sub->add_option("--seed", o->seed, "Random seed");
  sub->add_option("--threads", o->threads, "Generator threads (0: all cores)");
  return {sub, [o]() {
    const SynthSpec s = make_spec(*o);
    const auto plan = synth_plan(s);
    uint64_t routed = 0;
    for (const auto& t : plan)
      if (t.name.find("_exps.") != std::string::npos) routed += t.nbytes();
    fmt::print("synth {}{}{} ({}): {} layers, {} embd, {} experts top-{}, expert ffn {}, vocab {}, experts {}, skew {}, seed {}\n", o->preset,
               o->recipe.empty() ? "" : " --recipe ", o->recipe, synth_arch_name(s.arch), s.n_layer, s.n_embd, s.n_expert, s.n_expert_used, s.n_ff_exp,
               s.n_vocab, ggml_type_name(s.expert_type), s.skew, s.seed);
    const SynthResult r = synth_write(s, o->out, o->threads);
    const double gbps = r.seconds > 0 ? static_cast<double>(r.file_bytes) / r.seconds / 1e9 : 0.0;
    fmt::print("wrote {}: {} ({} bytes), {} tensors, routed experts {} ({} dense), {:.2f} s ({:.2f} GB/s)\n", o->out, format_bytes(r.file_bytes),
               r.file_bytes, r.n_tensors, format_bytes(routed), format_bytes(r.tensor_bytes - routed), r.seconds, gbps);
    return 0;
  }};
}

}  // namespace strata::cli
