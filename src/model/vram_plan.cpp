#include "model/vram_plan.h"

#include <algorithm>
#include <initializer_list>

#include "core/error.h"
#include "core/units.h"
#include "gpu/ops.h"
#include "model/vram_experts.h"
#include "model/vulkan_layer.h"

namespace strata {

namespace {

// An architecture with its own layer loop (ArchDef::run_layers: DeepSeek-V4's hyper-connections)
// cannot hand its layers to the executor.
bool arch_runs(const std::string& a) {
  const ArchDef* def = find_arch(a);
  return def && !def->run_layers;
}

bool same_rope(const RopeConfig& a, const RopeConfig& b) {
  return a.style == b.style && a.n_dims == b.n_dims && a.freq_base == b.freq_base && a.freq_scale == b.freq_scale &&
         a.ext_factor == b.ext_factor && a.attn_factor == b.attn_factor && a.beta_fast == b.beta_fast && a.beta_slow == b.beta_slow &&
         a.n_ctx_orig == b.n_ctx_orig;
}

// "iq1_s weights" for the first present matrix whose type the device's products do not run ("" none).
std::string unsupported_type(std::initializer_list<const QMatrix*> ms) {
  for (const QMatrix* m : ms)
    if (m->data && !gpu::matvec_supported(m->type)) return fmt::format("{} weights", ggml_type_name(m->type));
  return "";
}

// What the executor does not run in layer l's attention ("" when it runs it). rope0: the first
// layer whose attention the device runs (one rotation table serves every such layer).
std::string unsupported_attention(const ModelConfig& cfg, const ModelWeights& w, int l, int rope0) {
  const LayerConfig& lc = cfg.layers[l];
  const LayerWeights& lw = w.layers[l];
  if (lc.attn != AttnKind::Gqa) return lc.attn == AttnKind::DeltaNet ? "Gated DeltaNet attention" : "MLA attention";
  if (std::string t = unsupported_type({&lw.wq, &lw.wk, &lw.wv, &lw.wo}); !t.empty()) return t;
  if (lc.out_gate && lc.head_dim_k != lc.head_dim_v) return "a gated attention output with value heads unlike the query heads";
  if (lc.sinks && lw.sinks.empty()) return "attention sinks without their tensor";
  if (lc.n_head_kv < 1 || lc.n_head % lc.n_head_kv) return "a head count that is not a multiple of the KV heads";
  if (lc.rope.n_dims <= 0 || lc.rope.n_dims > lc.head_dim_k || lc.rope.n_dims % 2) return "a rotary width outside the head";
  if (rope0 >= 0 && !same_rope(lc.rope, cfg.layers[rope0].rope)) return fmt::format("a rotary configuration that differs from layer {}'s", rope0);
  return "";
}

// The same for its FFN. Routed experts run on the CPU (any gating, activation or bias there);
// the device runs the router's product and the shared experts.
std::string unsupported_ffn(const LayerConfig& lc, const LayerWeights& lw) {
  if (lc.ffn == FfnKind::Dense) {
    if (lc.act != GluAct::Silu) return "a dense FFN with a GLU activation other than SiLU";
    return unsupported_type({&lw.ffn_gate, &lw.ffn_up, &lw.ffn_down});
  }
  if (std::string t = unsupported_type({&lw.router, &lw.shexp_gate, &lw.shexp_up, &lw.shexp_down, &lw.shexp_gate_inp}); !t.empty()) return t;
  if (lc.shexp_gate && (lw.shexp_gate_inp.rows != 1 || lw.shexp_gate.empty())) return "a sigmoid-gated shared expert without one gate per token";
  if (!lw.shexp_gate.empty() && lc.act != GluAct::Silu) return "a shared expert with a GLU activation other than SiLU";
  return "";
}

uint64_t up(uint64_t bytes, uint64_t align) { return (std::max<uint64_t>(bytes, 4) + align - 1) / align * align; }

}  // namespace

uint64_t default_vram_budget(uint64_t device_local_bytes) {
  const uint64_t reserve = std::max(kVramReserveMin, device_local_bytes / 100 * kVramReservePercent);
  return device_local_bytes > reserve ? device_local_bytes - reserve : 0;
}

uint64_t VulkanScratch::bytes(uint64_t align) const {
  uint64_t b = 0;
  for (int64_t n : {x, xn, xq, q, qg, k, v, attn, out, shared, gate, up, logits, pos, cells, bases, rope, scores})
    b += strata::up(static_cast<uint64_t>(std::max<int64_t>(n, 1)) * 4, align);
  return b;
}

VulkanScratch vulkan_scratch(const ModelConfig& cfg, const ModelWeights& w, int n_batch, int n_ctx) {
  int64_t dq = 0, qg = 1, dk = 0, dv = 0, da = 0, ff = 1, ne = 1, heads = 1;
  const std::vector<VulkanBlocks> blocks = vulkan_blocks(cfg, w);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const LayerConfig& lc = cfg.layers[l];
    ne = std::max<int64_t>(ne, lc.n_expert);
    if (blocks[l].ffn) ff = std::max<int64_t>(ff, lc.ffn == FfnKind::Dense ? lc.n_ff : lc.n_ff_shexp);
    if (!blocks[l].attn) continue;
    dq = std::max<int64_t>(dq, int64_t{lc.n_head} * lc.head_dim_k);
    if (lc.out_gate) qg = std::max<int64_t>(qg, 2 * int64_t{lc.n_head} * lc.head_dim_k);
    dk = std::max<int64_t>(dk, int64_t{lc.n_head_kv} * lc.head_dim_k);
    dv = std::max<int64_t>(dv, int64_t{lc.n_head_kv} * lc.head_dim_v);
    da = std::max<int64_t>(da, int64_t{lc.n_head} * lc.head_dim_v);
    heads = std::max<int64_t>(heads, lc.n_head);
  }
  const int64_t n = std::max(n_batch, 1), d = cfg.n_embd;
  VulkanScratch s;
  s.x = s.xn = s.out = s.shared = n * d;
  s.q = n * dq;
  s.qg = n * qg;
  s.k = n * dk;
  s.v = n * dv;
  s.attn = n * da;
  s.gate = s.up = n * ff;
  s.xq = std::max({s.x, s.attn, s.gate});  // any product's input, rounded as the CPU's activations
  s.logits = n * ne;
  s.pos = s.cells = s.bases = n;
  const int rope0 = vulkan_rope_layer(blocks);
  s.rope = n * (rope0 < 0 ? 2 : cfg.layers[rope0].rope.n_dims);
  s.scores = static_cast<int64_t>(gpu::attention_scratch_floats(n, static_cast<int>(heads), std::max(n_ctx, 1)));
  return s;
}

std::vector<VulkanBlocks> vulkan_blocks(const ModelConfig& cfg, const ModelWeights& w) {
  std::vector<VulkanBlocks> v(static_cast<size_t>(cfg.n_layer));
  int rope0 = -1;
  for (int l = 0; l < cfg.n_layer; ++l) {
    v[l].attn_why = unsupported_attention(cfg, w, l, rope0);
    v[l].attn = v[l].attn_why.empty();
    if (v[l].attn && rope0 < 0) rope0 = l;
    v[l].ffn_why = unsupported_ffn(cfg.layers[l], w.layers[l]);
    v[l].ffn = v[l].ffn_why.empty();
  }
  return v;
}

int vulkan_rope_layer(const std::vector<VulkanBlocks>& blocks) {
  for (size_t l = 0; l < blocks.size(); ++l)
    if (blocks[l].attn) return static_cast<int>(l);
  return -1;
}

std::string vulkan_cpu_blocks(const std::vector<VulkanBlocks>& blocks, int n_layers) {
  // Runs of consecutive layers with the same reason: "attention of layers 0-23 (MLA attention)".
  std::string s;
  auto list = [&](const char* what, auto on_dev, auto why) {
    for (int l = 0; l < n_layers;) {
      if (on_dev(l)) {
        ++l;
        continue;
      }
      int e = l;
      while (e + 1 < n_layers && !on_dev(e + 1) && why(e + 1) == why(l)) ++e;
      s += fmt::format("{}{} of layer{} {} ({})", s.empty() ? "" : ", ", what, e > l ? "s" : "", e > l ? fmt::format("{}-{}", l, e) : std::to_string(l),
                       why(l));
      l = e + 1;
    }
  };
  list("attention", [&](int l) { return blocks[l].attn; }, [&](int l) { return blocks[l].attn_why; });
  list("FFN", [&](int l) { return blocks[l].ffn; }, [&](int l) { return blocks[l].ffn_why; });
  return s;
}

std::string vulkan_unsupported(const ModelConfig& cfg, const ModelWeights& w, GgmlType type_k, GgmlType type_v) {
  if (cfg.n_hc != 0) return fmt::format("{} uses hyper-connections, which the Vulkan executor does not run", cfg.arch);
  if (!arch_runs(cfg.arch)) return fmt::format("{} has its own layer loop, which the Vulkan executor does not run", cfg.arch);
  const std::vector<VulkanBlocks> blocks = vulkan_blocks(cfg, w);
  if (std::none_of(blocks.begin(), blocks.end(), [](const VulkanBlocks& b) { return b.attn || b.ffn; }))
    return fmt::format("the Vulkan executor runs no block of this {} file: {}", cfg.arch, vulkan_cpu_blocks(blocks, cfg.n_layer));
  for (const auto& [t, opt] : {std::pair{type_k, "--cache-type-k"}, std::pair{type_v, "--cache-type-v"}})
    if (!gpu::kv_cache_supported(t)) return fmt::format("{} {}: the Vulkan executor keeps its KV cache in f32, f16 or q8_0", opt, ggml_type_name(t));
  auto fits = [](GgmlType t, int width) { return t == GgmlType::Q8_0 ? width % 32 == 0 : t == GgmlType::F16 ? width % 2 == 0 : true; };
  for (int l = 0; l < cfg.n_layer; ++l) {
    const LayerConfig& lc = cfg.layers[l];
    if (!blocks[l].attn) continue;
    if (!fits(type_k, lc.n_head_kv * lc.head_dim_k) || !fits(type_v, lc.n_head_kv * lc.head_dim_v))
      return fmt::format("layer {} has KV rows of {}/{} values, which a {}/{} KV cache on the device does not hold in whole blocks (use "
                         "--cache-type-k/v f32)",
                         l, lc.n_head_kv * lc.head_dim_k, lc.n_head_kv * lc.head_dim_v, ggml_type_name(type_k), ggml_type_name(type_v));
  }
  return "";
}

namespace {

// The expert cache: what the layers leave of the budget (or s.experts bytes of it), in whole slots
// (device buffers of at most kVramExpertSlab), after the scratch its products need.
void plan_vram_experts(const ModelConfig& cfg, const ModelWeights& w, const VramShape& s, const std::vector<VulkanBlocks>& blocks, uint64_t used,
                       VramPlan& p) {
  if (p.gpu_layers < cfg.n_layer) {
    p.experts_note = "no VRAM expert cache: not every layer is on the device";
    return;
  }
  const VramExpertLayout lay = vram_expert_layout(cfg, w, blocks, p.gpu_layers, s.n_batch);
  if (!lay.any()) {
    p.experts_note = "no VRAM expert cache: " + lay.why;
    return;
  }
  const uint64_t room = s.budget == 0 ? (s.experts > 0 ? static_cast<uint64_t>(s.experts) + lay.scratch_bytes : 0)
                        : s.budget > used ? s.budget - used : 0;
  uint64_t bytes = room > lay.scratch_bytes ? room - lay.scratch_bytes : 0;
  if (s.experts > 0) bytes = std::min<uint64_t>(bytes, static_cast<uint64_t>(s.experts));
  uint64_t all = 0;  // a slot per routed expert of the device's layers is all it could use
  for (int l = 0; l < p.gpu_layers; ++l)
    if (lay.eligible[l]) all += static_cast<uint64_t>(cfg.layers[l].n_expert);
  // Slots in buffers of kVramExpertSlab at most, as VramExperts allocates them, each rounded to the plan's alignment.
  const uint64_t per_slab = std::max<uint64_t>(1, kVramExpertSlab / lay.slot_bytes);
  auto held_by = [&](uint64_t n) {
    return n / per_slab * up(per_slab * lay.slot_bytes, kVramPlanAlign) + (n % per_slab ? up(n % per_slab * lay.slot_bytes, kVramPlanAlign) : 0);
  };
  uint64_t slots = std::min(all, bytes / lay.slot_bytes);
  while (slots > 0 && held_by(slots) > bytes) --slots;
  const uint64_t held = held_by(slots);
  if (slots == 0) {
    p.experts_note = fmt::format("no VRAM expert cache: {} left, one expert slot needs {} and its scratch {}", format_bytes(room),
                                 format_bytes(lay.slot_bytes), format_bytes(lay.scratch_bytes));
    return;
  }
  p.expert_slots = static_cast<int>(slots);
  p.expert_slot_bytes = lay.slot_bytes;
  p.experts = held;
  p.expert_scratch = lay.scratch_bytes;
}

}  // namespace

VramPlan plan_vram(const ModelConfig& cfg, const ModelWeights& w, const VramShape& s) {
  STRATA_CHECK(gpu::kv_cache_supported(s.type_k) && gpu::kv_cache_supported(s.type_v),
               "--gpu vulkan: KV cache {}/{}: the Vulkan executor keeps its KV cache in f32, f16 or q8_0", ggml_type_name(s.type_k),
               ggml_type_name(s.type_v));
  STRATA_CHECK(s.n_ctx >= 1 && s.n_seq >= 1 && s.n_batch >= 1, "--gpu vulkan: context of {} positions, {} sequences, batch {}", s.n_ctx, s.n_seq,
               s.n_batch);
  VramPlan p;
  p.planned = true;
  p.device = s.device;
  p.budget = s.budget;
  p.type_k = s.type_k;
  p.type_v = s.type_v;
  p.n_layer = cfg.n_layer;
  const uint64_t a = kVramPlanAlign;
  const uint64_t rows = static_cast<uint64_t>(s.n_ctx) * static_cast<uint64_t>(s.n_seq);
  const std::vector<VulkanBlocks> blocks = vulkan_blocks(cfg, w);
  p.cpu_blocks = vulkan_cpu_blocks(blocks, cfg.n_layer);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const LayerConfig& lc = cfg.layers[l];
    uint64_t wb = 0;
    for (const LayerTensor& t : layer_tensors(lc, w.layers[l], l, blocks[l]))
      wb += t.mat ? gpu::matrix_device_bytes(t.mat->type, t.mat->rows, t.mat->cols, s.max_range, a) : up(static_cast<uint64_t>(t.vec->n) * 4, a);
    p.layer_weights.push_back(wb);
    p.layer_kv.push_back(blocks[l].attn ? up(rows * gpu::kv_row_bytes(s.type_k, int64_t{lc.n_head_kv} * lc.head_dim_k), a) +
                                              up(rows * gpu::kv_row_bytes(s.type_v, int64_t{lc.n_head_kv} * lc.head_dim_v), a)
                                        : 0);
  }
  const uint64_t scratch = vulkan_scratch(cfg, w, s.n_batch, s.n_ctx).bytes(a);
  uint64_t used = scratch;
  for (int l = 0; l < cfg.n_layer; ++l) {
    const uint64_t need = p.layer_weights[l] + p.layer_kv[l];
    if (s.budget > 0 && used + need > s.budget) {
      p.note = l == 0 ? fmt::format("--vram-budget {} holds no layer: the scratch {} and layer 0 ({} weights, {} KV cache) need {}", format_bytes(s.budget),
                                    format_bytes(scratch), format_bytes(p.layer_weights[0]), format_bytes(p.layer_kv[0]),
                                    format_bytes(scratch + need))
                      : fmt::format("--vram-budget {} holds layers 0..{}; layer {} needs {} more ({} weights, {} KV cache): layers {}..{} run on the CPU",
                                    format_bytes(s.budget), l - 1, l, format_bytes(used + need - s.budget), format_bytes(p.layer_weights[l]),
                                    format_bytes(p.layer_kv[l]), l, cfg.n_layer - 1);
      break;
    }
    used += need;
    p.weights += p.layer_weights[l];
    p.kv += p.layer_kv[l];
    ++p.gpu_layers;
  }
  p.scratch = p.gpu_layers > 0 ? scratch : 0;
  if (s.experts != 0 && p.gpu_layers > 0) plan_vram_experts(cfg, w, s, blocks, used, p);
  return p;
}

std::string VramPlan::describe() const {
  if (!planned) return "";
  std::string s = fmt::format("vram plan{}: {} of {} layers on the device (layer weights {} + KV cache {} ({}/{}) + scratch {} = {} of budget {})",
                              device.empty() ? "" : " (" + device + ")", gpu_layers, n_layer, format_bytes(weights), format_bytes(kv),
                              ggml_type_name(type_k), ggml_type_name(type_v), format_bytes(scratch), format_bytes(weights + kv + scratch),
                              budget ? format_bytes(budget) : "none");
  if (!note.empty()) s += "; " + note;
  if (!cpu_blocks.empty()) s += "; on the CPU: " + cpu_blocks;
  if (expert_slots > 0)
    s += fmt::format("; routed experts: {} slots of {} ({}) + scratch {}", expert_slots, format_bytes(expert_slot_bytes), format_bytes(experts),
                     format_bytes(expert_scratch));
  else if (!experts_note.empty())
    s += "; " + experts_note;
  return s;
}

}  // namespace strata
