#include "model/vulkan_executor.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "gpu/ops.h"
#include "kernels/ops.h"
#include "kernels/quants.h"
#include "model/forward.h"
#include "model/model.h"

namespace strata {

namespace {

// The architectures whose forward pass is Model's pre-norm loop over layers this executor runs,
// each checked on its golden sets through it (tests/gpu/test_vulkan_dense.cpp, test_vulkan_moe.cpp).
constexpr const char* kArchs[] = {"llama", "qwen3", "qwen3moe", "glm4moe", "minimax-m2", "gpt-oss"};

bool arch_runs(const std::string& a) {
  return std::find_if(std::begin(kArchs), std::end(kArchs), [&](const char* n) { return a == n; }) != std::end(kArchs);
}

std::string arch_list() {
  std::string s;
  for (const char* a : kArchs) s += std::string(s.empty() ? "" : ", ") + a;
  return s;
}

struct GpuLayer {
  gpu::Buffer attn_norm, ffn_norm;                  // [n_embd]
  gpu::Buffer q_norm, k_norm;  // [head_dim_k] (qk_norm), [n_head * head_dim_k] / [n_head_kv * head_dim_k] (qk_norm_full), or empty
  gpu::Buffer bq, bk, bv, bo;  // [n_head * head_dim_k], [n_head_kv * head_dim_k], [n_head_kv * head_dim_v], [n_embd] (or empty)
  gpu::Buffer sinks;           // [n_head] sink logits (or empty)
  gpu::DeviceMatrix wq, wk, wv, wo;
  gpu::DeviceMatrix gate, up, down;                 // the dense FFN, or an MoE layer's shared expert (empty: none)
  gpu::DeviceMatrix router;                         // [n_expert, n_embd] (MoE layers)
  gpu::Buffer k_cache, v_cache;  // [n_seq * n_ctx, n_head_kv * head_dim_k], [.., n_head_kv * head_dim_v]: row seq * n_ctx + pos
};

bool same_rope(const RopeConfig& a, const RopeConfig& b) {
  return a.style == b.style && a.n_dims == b.n_dims && a.freq_base == b.freq_base && a.freq_scale == b.freq_scale &&
         a.ext_factor == b.ext_factor && a.attn_factor == b.attn_factor && a.beta_fast == b.beta_fast && a.beta_slow == b.beta_slow &&
         a.n_ctx_orig == b.n_ctx_orig;
}

// What the executor does not run in layer l's attention ("" when it runs it).
std::string unsupported_attention(const ModelConfig& cfg, const ModelWeights& w, int l) {
  const LayerConfig& lc = cfg.layers[l];
  const LayerWeights& lw = w.layers[l];
  if (lc.attn != AttnKind::Gqa) return "attention other than GQA";
  if (lc.out_gate) return "a gated attention output";
  if (lc.sinks && lw.sinks.empty()) return "attention sinks without their tensor";
  if (lc.n_head_kv < 1 || lc.n_head % lc.n_head_kv) return "a head count that is not a multiple of the KV heads";
  if (lc.rope.n_dims <= 0 || lc.rope.n_dims > lc.head_dim_k || lc.rope.n_dims % 2) return "a rotary width outside the head";
  if (!same_rope(lc.rope, cfg.layers[0].rope)) return "a rotary configuration that differs from layer 0's";
  return "";
}

// The same for its FFN. Routed experts run on the CPU (any gating, activation or bias there);
// the device runs the router's product and the shared experts.
std::string unsupported_ffn(const LayerConfig& lc, const LayerWeights& lw) {
  if (lc.ffn == FfnKind::Dense) return lc.act != GluAct::Silu ? "a dense FFN with a GLU activation other than SiLU" : "";
  if (lc.shexp_gate || !lw.shexp_gate_inp.empty()) return "a sigmoid-gated shared expert";
  if (!lw.shexp_gate.empty() && lc.act != GluAct::Silu) return "a shared expert with a GLU activation other than SiLU";
  return "";
}

class VulkanExecutor final : public LayerExecutor {
 public:
  VulkanExecutor(std::unique_ptr<gpu::Device> dev, const Model& m, int n_ctx, int n_seq)
      : dev_(std::move(dev)), ops_(*dev_), n_ctx_(n_ctx), n_seq_(n_seq) {
    const ModelConfig& cfg = m.config();
    const ModelWeights& w = m.weights();
    STRATA_CHECK(arch_runs(cfg.arch), "--gpu vulkan: the Vulkan executor runs the GQA architectures {} so far, not {} (issue 35)", arch_list(),
                 cfg.arch);
    STRATA_CHECK(cfg.n_hc == 0, "--gpu vulkan: {} uses hyper-connections, which the Vulkan executor does not run", cfg.arch);
    for (int l = 0; l < cfg.n_layer; ++l) {
      std::string why = unsupported_attention(cfg, w, l);
      if (why.empty()) why = unsupported_ffn(cfg.layers[l], w.layers[l]);
      STRATA_CHECK(why.empty(), "--gpu vulkan: layer {} of this {} file uses {}, which the Vulkan executor does not run yet", l, cfg.arch, why);
    }
    for (int l = 0; l < cfg.n_layer; ++l) layers_.push_back(upload_layer(cfg, w, l));
  }

  std::string name() const override { return "vulkan: " + dev_->info().name; }

  void run_layers(FwdCtx& c) override {
    const ModelConfig& cfg = c.cfg;
    const int n = c.b.n, d = cfg.n_embd;
    begin_pass(c);
    for (int l = 0; l < cfg.n_layer; ++l) {
      attention(c, l);
      ops_.rmsnorm(x_, &layers_[l].ffn_norm, xn_, d, n, cfg.rms_eps);
      if (cfg.layers[l].ffn == FfnKind::Moe) moe(c, l);
      else glu(layers_[l], xn_, n, out_);
      ops_.add(x_, out_, int64_t{n} * d);
    }
    dev_->download(x_, 0, c.st.x.data(), static_cast<uint64_t>(n) * d * 4);
  }

 private:
  GpuLayer upload_layer(const ModelConfig& cfg, const ModelWeights& w, int l) {
    const LayerConfig& lc = cfg.layers[l];
    const LayerWeights& lw = w.layers[l];
    const std::string b = "blk." + std::to_string(l) + ".";
    auto vec = [&](const VecF32& v, const std::string& name) {
      STRATA_CHECK(!v.empty(), "--gpu vulkan: {} is missing", name);
      return gpu::upload_f32(*dev_, v.data, v.n, name);
    };
    GpuLayer g;
    g.attn_norm = vec(lw.attn_norm, b + "attn_norm.weight");
    g.ffn_norm = vec(lw.ffn_norm, b + "ffn_norm.weight");
    if (lc.qk_norm || lc.qk_norm_full) {
      g.q_norm = vec(lw.q_norm, b + "attn_q_norm.weight");
      g.k_norm = vec(lw.k_norm, b + "attn_k_norm.weight");
    }
    if (!lw.bq.empty()) g.bq = vec(lw.bq, b + "attn_q.bias");
    if (!lw.bk.empty()) g.bk = vec(lw.bk, b + "attn_k.bias");
    if (!lw.bv.empty()) g.bv = vec(lw.bv, b + "attn_v.bias");
    if (!lw.bo.empty()) g.bo = vec(lw.bo, b + "attn_output.bias");
    if (lc.sinks) g.sinks = vec(lw.sinks, b + "attn_sinks.weight");
    g.wq = gpu::upload_matrix(*dev_, lw.wq, b + "attn_q.weight");
    g.wk = gpu::upload_matrix(*dev_, lw.wk, b + "attn_k.weight");
    g.wv = gpu::upload_matrix(*dev_, lw.wv, b + "attn_v.weight");
    g.wo = gpu::upload_matrix(*dev_, lw.wo, b + "attn_output.weight");
    if (lc.ffn == FfnKind::Dense) {
      g.gate = gpu::upload_matrix(*dev_, lw.ffn_gate, b + "ffn_gate.weight");
      g.up = gpu::upload_matrix(*dev_, lw.ffn_up, b + "ffn_up.weight");
      g.down = gpu::upload_matrix(*dev_, lw.ffn_down, b + "ffn_down.weight");
    } else {
      g.router = gpu::upload_matrix(*dev_, lw.router, b + "ffn_gate_inp.weight");
      if (!lw.shexp_gate.empty()) {
        g.gate = gpu::upload_matrix(*dev_, lw.shexp_gate, b + "ffn_gate_shexp.weight");
        g.up = gpu::upload_matrix(*dev_, lw.shexp_up, b + "ffn_up_shexp.weight");
        g.down = gpu::upload_matrix(*dev_, lw.shexp_down, b + "ffn_down_shexp.weight");
      }
    }
    const uint64_t rows = static_cast<uint64_t>(n_ctx_) * n_seq_;
    g.k_cache = dev_->alloc(rows * lc.n_head_kv * lc.head_dim_k * 4, b + "k cache");
    g.v_cache = dev_->alloc(rows * lc.n_head_kv * lc.head_dim_v * 4, b + "v cache");
    return g;
  }

  // Positions, KV cells (row seq * n_ctx + pos) and sequence bases, scratch for n tokens, the
  // rotation table; the embeddings go up to x_.
  void begin_pass(FwdCtx& c) {
    const ModelConfig& cfg = c.cfg;
    const Batch& b = c.b;
    const int n = b.n, d = cfg.n_embd;
    uint32_t max_pos = 0;
    pos_.resize(static_cast<size_t>(3 * n));  // [positions | cells | bases]
    for (int i = 0; i < n; ++i) {
      const int s = c.seq(i);
      STRATA_CHECK(s >= 0 && s < n_seq_, "--gpu vulkan: batch row {} is of sequence {}, the executor holds {}", i, s, n_seq_);
      STRATA_CHECK(b.pos[i] >= 0 && b.pos[i] < n_ctx_, "position {} is outside the context (size {}): the prompt is too long for -c {}", b.pos[i],
                   n_ctx_, n_ctx_);
      const uint32_t base = static_cast<uint32_t>(s) * static_cast<uint32_t>(n_ctx_);
      pos_[i] = static_cast<uint32_t>(b.pos[i]);
      pos_[n + i] = base + pos_[i];
      pos_[2 * n + i] = base;
      max_pos = std::max(max_pos, pos_[i]);
    }
    n_keys_ = static_cast<int>(max_pos) + 1;
    // Embeddings on the host (rows of the token table), as the CPU path computes them.
    for (int i = 0; i < n; ++i) dequantize_row(c.w.tok_embd.type, c.w.tok_embd.row(b.tokens[i]), c.st.x.data() + static_cast<size_t>(i) * d, d);
    int64_t dq = 0, dk = 0, dv = 0, da = 0, ff = 1, ne = 1, heads = 0;
    for (const LayerConfig& lc : cfg.layers) {
      dq = std::max<int64_t>(dq, int64_t{lc.n_head} * lc.head_dim_k);
      dk = std::max<int64_t>(dk, int64_t{lc.n_head_kv} * lc.head_dim_k);
      dv = std::max<int64_t>(dv, int64_t{lc.n_head_kv} * lc.head_dim_v);
      da = std::max<int64_t>(da, int64_t{lc.n_head} * lc.head_dim_v);
      ff = std::max<int64_t>(ff, lc.ffn == FfnKind::Dense ? lc.n_ff : lc.n_ff_shexp);
      ne = std::max<int64_t>(ne, lc.n_expert);
      heads = std::max<int64_t>(heads, lc.n_head);
    }
    const int nd = cfg.layers[0].rope.n_dims;
    ensure(x_, n * d, "x");
    ensure(xn_, n * d, "xn");
    ensure(q_, n * dq, "q");
    ensure(k_, n * dk, "k");
    ensure(v_, n * dv, "v");
    ensure(attn_, n * da, "attn");
    ensure(out_, n * d, "out");
    ensure(sh_, n * d, "shared expert out");
    ensure(g_, n * ff, "ffn gate");
    ensure(u_, n * ff, "ffn up");
    ensure(logits_, n * ne, "router logits");
    ensure(pos_b_, n, "positions");
    ensure(cell_b_, n, "kv cells");
    ensure(base_b_, n, "sequence bases");
    ensure(cs_b_, int64_t{n} * nd, "rope cache");
    ensure(scores_, n * heads * n_keys_, "attention scores");
    // Rotation angles on the host (rope_cache: YaRN, rope_freqs), one table for every layer.
    RopeParams rp = rope_params(cfg.layers[0].rope);
    if (!c.w.rope_freqs.empty()) rp.freq_factors = c.w.rope_freqs.data;
    cs_.resize(static_cast<size_t>(n) * nd);
    for (int i = 0; i < n; ++i) rope_cache(rp, static_cast<float>(b.pos[i]), cs_.data() + static_cast<size_t>(i) * nd);
    dev_->upload(x_, 0, c.st.x.data(), static_cast<uint64_t>(n) * d * 4);
    dev_->upload(pos_b_, 0, pos_.data(), static_cast<uint64_t>(n) * 4);
    dev_->upload(cell_b_, 0, pos_.data() + n, static_cast<uint64_t>(n) * 4);
    dev_->upload(base_b_, 0, pos_.data() + 2 * n, static_cast<uint64_t>(n) * 4);
    dev_->upload(cs_b_, 0, cs_.data(), cs_.size() * 4);
  }

  // x_ += attention(rmsnorm(x_)) of layer l.
  void attention(FwdCtx& c, int l) {
    const LayerConfig& lc = c.cfg.layers[l];
    const GpuLayer& g = layers_[l];
    const int n = c.b.n, d = c.cfg.n_embd;
    const float eps = c.cfg.rms_eps;
    ops_.rmsnorm(x_, &g.attn_norm, xn_, d, n, eps);
    ops_.matvec(g.wq, xn_, n, q_);
    ops_.matvec(g.wk, xn_, n, k_);
    ops_.matvec(g.wv, xn_, n, v_);
    const int64_t dq = int64_t{lc.n_head} * lc.head_dim_k, dk = int64_t{lc.n_head_kv} * lc.head_dim_k;
    if (g.bq) ops_.add_bias(q_, g.bq, dq, n);
    if (g.bk) ops_.add_bias(k_, g.bk, dk, n);
    if (g.bv) ops_.add_bias(v_, g.bv, int64_t{lc.n_head_kv} * lc.head_dim_v, n);
    if (lc.qk_norm_full) {  // one RMSNorm over all heads' values at once
      ops_.rmsnorm(q_, &g.q_norm, q_, dq, n, eps);
      ops_.rmsnorm(k_, &g.k_norm, k_, dk, n, eps);
    } else if (lc.qk_norm) {
      ops_.rmsnorm(q_, &g.q_norm, q_, lc.head_dim_k, int64_t{n} * lc.n_head, eps);
      ops_.rmsnorm(k_, &g.k_norm, k_, lc.head_dim_k, int64_t{n} * lc.n_head_kv, eps);
    }
    const bool neox = lc.rope.style == RopeStyle::Neox;
    ops_.rope(q_, cs_b_, lc.head_dim_k, lc.n_head, lc.rope.n_dims, neox, n);
    ops_.rope(k_, cs_b_, lc.head_dim_k, lc.n_head_kv, lc.rope.n_dims, neox, n);
    ops_.kv_store(k_, cell_b_, g.k_cache, dk, n);
    ops_.kv_store(v_, cell_b_, g.v_cache, int64_t{lc.n_head_kv} * lc.head_dim_v, n);
    const gpu::AttnShape a{lc.n_head, lc.n_head_kv, lc.head_dim_k, lc.head_dim_v, n_keys_, lc.sliding_window, lc.kq_scale, n_ctx_ * n_seq_};
    ops_.attention(q_, g.k_cache, g.v_cache, pos_b_, g.sinks ? &g.sinks : nullptr, attn_, scores_, a, n, &base_b_);
    ops_.matvec(g.wo, attn_, n, out_);
    if (g.bo) ops_.add_bias(out_, g.bo, d, n);
    ops_.add(x_, out_, int64_t{n} * d);
  }

  // y [n, n_embd] = down(silu(gate(x)) * up(x)): the dense FFN or a shared expert.
  void glu(const GpuLayer& g, const gpu::Buffer& x, int n, const gpu::Buffer& y) {
    ops_.matvec(g.gate, x, n, g_);
    ops_.matvec(g.up, x, n, u_);
    ops_.swiglu(g_, u_, g_, n * g.gate.rows);
    ops_.matvec(g.down, g_, n, y);
  }

  // out_ = routed experts + shared experts of MoE layer l on xn_. The router's product and the
  // shared experts run here; the normalized rows and the router's product cross to the host, where
  // the expert tier computes the routed experts (streaming them under --ram-budget); their sum
  // comes back. The CPU path's order: routed sum, plus shared, then the residual add.
  void moe(FwdCtx& c, int l) {
    const GpuLayer& g = layers_[l];
    const int n = c.b.n, d = c.cfg.n_embd;
    const int64_t ne = c.cfg.layers[l].n_expert;
    ops_.matvec(g.router, xn_, n, logits_);
    const bool shared = !g.gate.parts.empty();
    if (shared) glu(g, xn_, n, sh_);
    dev_->download(xn_, 0, c.st.xn.data(), static_cast<uint64_t>(n) * d * 4);
    dev_->download(logits_, 0, c.st.router.data(), static_cast<uint64_t>(n * ne) * 4);
    moe_routed_experts(c, l);
    dev_->upload(out_, 0, c.st.out.data(), static_cast<uint64_t>(n) * d * 4);
    if (shared) ops_.add(out_, sh_, int64_t{n} * d);
  }

  // A device buffer of at least n floats (grown, never shrunk).
  void ensure(gpu::Buffer& buf, int64_t n, const char* what) {
    const uint64_t bytes = static_cast<uint64_t>(std::max<int64_t>(n, 1)) * 4;
    if (!buf || buf.bytes() < bytes) {
      dev_->submit();  // work recorded on the old buffer runs before it goes
      buf = dev_->alloc(bytes, std::string("vulkan executor ") + what);
    }
  }

  std::unique_ptr<gpu::Device> dev_;
  gpu::Ops ops_;
  int n_ctx_, n_seq_;
  int n_keys_ = 0;  // KV rows the pass's attention reads (its largest position + 1)
  std::vector<GpuLayer> layers_;
  gpu::Buffer x_, xn_, q_, k_, v_, attn_, out_, sh_, g_, u_, logits_, pos_b_, cell_b_, base_b_, cs_b_, scores_;
  std::vector<uint32_t> pos_;  // [positions | cells | bases] of the pass's tokens
  std::vector<float> cs_;
};

}  // namespace

std::unique_ptr<LayerExecutor> make_vulkan_executor(std::unique_ptr<gpu::Device> dev, const Model& model, int n_ctx, int n_seq) {
  STRATA_CHECK(dev, "--gpu vulkan: no device");
  STRATA_CHECK(n_ctx >= 1 && n_seq >= 1, "--gpu vulkan: context of {} positions, {} sequences", n_ctx, n_seq);
  STRATA_CHECK(static_cast<uint64_t>(n_ctx) * static_cast<uint64_t>(n_seq) <= 0x7FFFFFFFull, "--gpu vulkan: {} sequences of {} positions", n_seq,
               n_ctx);
  return std::make_unique<VulkanExecutor>(std::move(dev), model, n_ctx, n_seq);
}

}  // namespace strata
