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

struct GpuLayer {
  gpu::Buffer attn_norm, ffn_norm, q_norm, k_norm;  // [n_embd], [n_embd], [head_dim_k] x2 (empty without qk_norm)
  gpu::DeviceMatrix wq, wk, wv, wo, gate, up, down;
  gpu::Buffer k_cache, v_cache;  // [n_ctx, n_head_kv * head_dim_k], [n_ctx, n_head_kv * head_dim_v]
};

bool same_rope(const RopeConfig& a, const RopeConfig& b) {
  return a.style == b.style && a.n_dims == b.n_dims && a.freq_base == b.freq_base && a.freq_scale == b.freq_scale &&
         a.ext_factor == b.ext_factor && a.attn_factor == b.attn_factor && a.beta_fast == b.beta_fast && a.beta_slow == b.beta_slow &&
         a.n_ctx_orig == b.n_ctx_orig;
}

// What the executor does not run in layer l ("" when it runs it).
std::string unsupported(const ModelConfig& cfg, const ModelWeights& w, int l) {
  const LayerConfig& lc = cfg.layers[l];
  const LayerWeights& lw = w.layers[l];
  if (lc.attn != AttnKind::Gqa) return "attention other than GQA";
  if (lc.ffn != FfnKind::Dense) return "a mixture-of-experts FFN (routed experts on the GPU path come next)";
  if (lc.act != GluAct::Silu) return "a GLU activation other than SiLU";
  if (lc.qk_norm_full) return "q/k RMSNorm over all heads";
  if (lc.attn_bias || !lw.bq.empty() || !lw.bk.empty() || !lw.bv.empty() || !lw.bo.empty()) return "attention biases";
  if (lc.sinks || !lw.sinks.empty()) return "attention sinks";
  if (lc.out_gate) return "a gated attention output";
  if (lc.sliding_window) return "sliding-window attention";
  if (lc.n_head_kv < 1 || lc.n_head % lc.n_head_kv) return "a head count that is not a multiple of the KV heads";
  if (lc.rope.n_dims <= 0 || lc.rope.n_dims > lc.head_dim_k || lc.rope.n_dims % 2) return "a rotary width outside the head";
  if (!same_rope(lc.rope, cfg.layers[0].rope)) return "a rotary configuration that differs from layer 0's";
  return "";
}

class VulkanExecutor final : public LayerExecutor {
 public:
  VulkanExecutor(std::unique_ptr<gpu::Device> dev, const Model& m, int n_ctx) : dev_(std::move(dev)), ops_(*dev_), n_ctx_(n_ctx) {
    const ModelConfig& cfg = m.config();
    const ModelWeights& w = m.weights();
    STRATA_CHECK(cfg.arch == "llama" || cfg.arch == "qwen3",
                 "--gpu vulkan: the Vulkan executor runs the dense GQA architectures llama and qwen3 so far, not {} (issue 35)", cfg.arch);
    STRATA_CHECK(cfg.n_hc == 0, "--gpu vulkan: {} uses hyper-connections, which the Vulkan executor does not run", cfg.arch);
    for (int l = 0; l < cfg.n_layer; ++l) {
      const std::string why = unsupported(cfg, w, l);
      STRATA_CHECK(why.empty(), "--gpu vulkan: layer {} of this {} file uses {}, which the Vulkan executor does not run yet", l, cfg.arch, why);
    }
    auto vec = [&](const VecF32& v, const std::string& name) {
      STRATA_CHECK(!v.empty(), "--gpu vulkan: {} is missing", name);
      return gpu::upload_f32(*dev_, v.data, v.n, name);
    };
    for (int l = 0; l < cfg.n_layer; ++l) {
      const LayerConfig& lc = cfg.layers[l];
      const LayerWeights& lw = w.layers[l];
      const std::string b = "blk." + std::to_string(l) + ".";
      GpuLayer g;
      g.attn_norm = vec(lw.attn_norm, b + "attn_norm.weight");
      g.ffn_norm = vec(lw.ffn_norm, b + "ffn_norm.weight");
      if (lc.qk_norm) {
        g.q_norm = vec(lw.q_norm, b + "attn_q_norm.weight");
        g.k_norm = vec(lw.k_norm, b + "attn_k_norm.weight");
      }
      g.wq = gpu::upload_matrix(*dev_, lw.wq, b + "attn_q.weight");
      g.wk = gpu::upload_matrix(*dev_, lw.wk, b + "attn_k.weight");
      g.wv = gpu::upload_matrix(*dev_, lw.wv, b + "attn_v.weight");
      g.wo = gpu::upload_matrix(*dev_, lw.wo, b + "attn_output.weight");
      g.gate = gpu::upload_matrix(*dev_, lw.ffn_gate, b + "ffn_gate.weight");
      g.up = gpu::upload_matrix(*dev_, lw.ffn_up, b + "ffn_up.weight");
      g.down = gpu::upload_matrix(*dev_, lw.ffn_down, b + "ffn_down.weight");
      g.k_cache = dev_->alloc(static_cast<uint64_t>(n_ctx) * lc.n_head_kv * lc.head_dim_k * 4, b + "k cache");
      g.v_cache = dev_->alloc(static_cast<uint64_t>(n_ctx) * lc.n_head_kv * lc.head_dim_v * 4, b + "v cache");
      layers_.push_back(std::move(g));
    }
  }

  std::string name() const override { return "vulkan: " + dev_->info().name; }

  void run_layers(FwdCtx& c) override {
    const ModelConfig& cfg = c.cfg;
    const ModelWeights& w = c.w;
    const Batch& b = c.b;
    const int n = b.n, d = cfg.n_embd;
    uint32_t max_pos = 0;
    pos_.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      STRATA_CHECK(c.seq(i) == 0, "--gpu vulkan: the Vulkan executor runs one sequence so far (batch row {} is of sequence {})", i, c.seq(i));
      STRATA_CHECK(b.pos[i] >= 0 && b.pos[i] < n_ctx_, "position {} is outside the context (size {}): the prompt is too long for -c {}",
                   b.pos[i], n_ctx_, n_ctx_);
      pos_[i] = static_cast<uint32_t>(b.pos[i]);
      max_pos = std::max(max_pos, pos_[i]);
    }
    // Embeddings on the host (rows of the token table), as the CPU path computes them.
    for (int i = 0; i < n; ++i) dequantize_row(w.tok_embd.type, w.tok_embd.row(b.tokens[i]), c.st.x.data() + static_cast<size_t>(i) * d, d);
    const LayerConfig& l0 = cfg.layers[0];
    const int dq = l0.n_head * l0.head_dim_k, dk = l0.n_head_kv * l0.head_dim_k, dv = l0.n_head_kv * l0.head_dim_v;
    const int da = l0.n_head * l0.head_dim_v, ff = l0.n_ff, nd = l0.rope.n_dims;
    const int n_keys = static_cast<int>(max_pos) + 1;
    ensure(x_, int64_t{n} * d, "x");
    ensure(xn_, int64_t{n} * d, "xn");
    ensure(q_, int64_t{n} * dq, "q");
    ensure(k_, int64_t{n} * dk, "k");
    ensure(v_, int64_t{n} * dv, "v");
    ensure(attn_, int64_t{n} * da, "attn");
    ensure(out_, int64_t{n} * d, "out");
    ensure(g_, int64_t{n} * ff, "ffn gate");
    ensure(u_, int64_t{n} * ff, "ffn up");
    ensure(pos_b_, n, "positions");
    ensure(cs_b_, int64_t{n} * nd, "rope cache");
    ensure(scores_, int64_t{n} * l0.n_head * n_keys, "attention scores");
    // Rotation angles on the host (rope_cache: YaRN, rope_freqs), one table for every layer.
    RopeParams rp = rope_params(l0.rope);
    if (!w.rope_freqs.empty()) rp.freq_factors = w.rope_freqs.data;
    cs_.resize(static_cast<size_t>(n) * nd);
    for (int i = 0; i < n; ++i) rope_cache(rp, static_cast<float>(b.pos[i]), cs_.data() + static_cast<size_t>(i) * nd);
    dev_->upload(x_, 0, c.st.x.data(), static_cast<uint64_t>(n) * d * 4);
    dev_->upload(pos_b_, 0, pos_.data(), static_cast<uint64_t>(n) * 4);
    dev_->upload(cs_b_, 0, cs_.data(), cs_.size() * 4);
    for (int l = 0; l < cfg.n_layer; ++l) {
      const LayerConfig& lc = cfg.layers[l];
      GpuLayer& g = layers_[l];
      ops_.rmsnorm(x_, &g.attn_norm, xn_, d, n, cfg.rms_eps);
      ops_.matvec(g.wq, xn_, n, q_);
      ops_.matvec(g.wk, xn_, n, k_);
      ops_.matvec(g.wv, xn_, n, v_);
      if (lc.qk_norm) {
        ops_.rmsnorm(q_, &g.q_norm, q_, lc.head_dim_k, int64_t{n} * lc.n_head, cfg.rms_eps);
        ops_.rmsnorm(k_, &g.k_norm, k_, lc.head_dim_k, int64_t{n} * lc.n_head_kv, cfg.rms_eps);
      }
      const bool neox = lc.rope.style == RopeStyle::Neox;
      ops_.rope(q_, cs_b_, lc.head_dim_k, lc.n_head, nd, neox, n);
      ops_.rope(k_, cs_b_, lc.head_dim_k, lc.n_head_kv, nd, neox, n);
      ops_.kv_store(k_, pos_b_, g.k_cache, dk, n);
      ops_.kv_store(v_, pos_b_, g.v_cache, dv, n);
      const gpu::AttnShape a{lc.n_head, lc.n_head_kv, lc.head_dim_k, lc.head_dim_v, n_keys, 0, lc.kq_scale};
      ops_.attention(q_, g.k_cache, g.v_cache, pos_b_, nullptr, attn_, scores_, a, n);
      ops_.matvec(g.wo, attn_, n, out_);
      ops_.add(x_, out_, int64_t{n} * d);
      ops_.rmsnorm(x_, &g.ffn_norm, xn_, d, n, cfg.rms_eps);
      ops_.matvec(g.gate, xn_, n, g_);
      ops_.matvec(g.up, xn_, n, u_);
      ops_.swiglu(g_, u_, g_, int64_t{n} * ff);
      ops_.matvec(g.down, g_, n, out_);
      ops_.add(x_, out_, int64_t{n} * d);
    }
    dev_->download(x_, 0, c.st.x.data(), static_cast<uint64_t>(n) * d * 4);
  }

 private:
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
  int n_ctx_;
  std::vector<GpuLayer> layers_;
  gpu::Buffer x_, xn_, q_, k_, v_, attn_, out_, g_, u_, pos_b_, cs_b_, scores_;
  std::vector<uint32_t> pos_;
  std::vector<float> cs_;
};

}  // namespace

std::unique_ptr<LayerExecutor> make_vulkan_executor(std::unique_ptr<gpu::Device> dev, const Model& model, int n_ctx) {
  STRATA_CHECK(dev, "--gpu vulkan: no device");
  STRATA_CHECK(n_ctx >= 1, "--gpu vulkan: context of {} positions", n_ctx);
  return std::make_unique<VulkanExecutor>(std::move(dev), model, n_ctx);
}

}  // namespace strata
