#include "model/vulkan_executor.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <tuple>

#include "core/clock.h"
#include "core/error.h"
#include "core/units.h"
#include "gpu/ops.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/quants.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/vram_experts.h"
#include "model/vulkan_layer.h"

namespace strata {

namespace {

DeviceExpertStats vram_stats(const VramExperts& v) {
  DeviceExpertStats s;
  static_cast<VramExpertCounters&>(s) = v.counters();
  s.slots = v.n_slots();
  s.slot_bytes = v.layout().slot_bytes;
  s.resident = static_cast<int>(v.state().resident_count());
  s.tiers = std::string(tier_mode_name(v.mode()));
  return s;
}

class VulkanExecutor final : public LayerExecutor {
 public:
  VulkanExecutor(std::unique_ptr<gpu::Device> dev, const Model& m, const VramShape& shape, const VramPlan& plan)
      : dev_(std::move(dev)), ops_(*dev_), n_ctx_(shape.n_ctx), n_seq_(shape.n_seq), n_batch_(shape.n_batch), type_k_(shape.type_k),
        type_v_(shape.type_v), n_gpu_(plan.gpu_layers), blocks_(vulkan_blocks(m.config(), m.weights())), rope0_(vulkan_rope_layer(blocks_)) {
    dev_->set_budget(plan.budget);  // the device refuses any allocation past it
    const VulkanScratch sc = vulkan_scratch(m.config(), m.weights(), n_batch_, n_ctx_);
    using Alloc = std::tuple<gpu::Buffer*, int64_t, const char*>;
    for (auto [buf, n, what] : std::initializer_list<Alloc>{{&x_, sc.x, "x"}, {&xn_, sc.xn, "xn"}, {&xq_, sc.xq, "quantized activations"}, {&q_, sc.q, "q"}, {&qg_, sc.qg, "gated q"}, {&k_, sc.k, "k"}, {&v_, sc.v, "v"},
                                {&attn_, sc.attn, "attn"}, {&out_, sc.out, "out"}, {&sh_, sc.shared, "shared expert out"},
                                {&g_, sc.gate, "ffn gate"}, {&u_, sc.up, "ffn up"}, {&logits_, sc.logits, "router logits"},
                                {&pos_b_, sc.pos, "positions"}, {&cell_b_, sc.cells, "kv cells"}, {&base_b_, sc.bases, "sequence bases"},
                                {&cs_b_, sc.rope, "rope cache"}, {&scores_, sc.scores, "attention scores"}})
      *buf = dev_->alloc(static_cast<uint64_t>(std::max<int64_t>(n, 1)) * 4, std::string("vulkan executor ") + what);
    for (int l = 0; l < n_gpu_; ++l) layers_.push_back(upload_layer(m.config(), m.weights(), l));
    if (plan.expert_slots > 0) {
      VramExpertOptions o;
      o.slot_bytes_total = static_cast<uint64_t>(plan.expert_slots) * plan.expert_slot_bytes;
      o.upload_per_pass = shape.upload_per_pass;
      o.mode = shape.tiers;
      o.policy = shape.expert_policy;
      o.pp = shape.pp;
      vram_ = std::make_unique<VramExperts>(*dev_, ops_, m.config(), m.weights(), vram_expert_layout(m.config(), m.weights(), blocks_, n_gpu_, n_batch_), o);
    }
    reset_stats();
  }

  std::string name() const override { return "vulkan: " + dev_->info().name; }

  int n_layers() const override { return n_gpu_; }
  DeviceMemory device_memory() const override { return {dev_->device_bytes(), dev_->device_peak(), dev_->budget()}; }
  DeviceStats stats() const override {
    DeviceStats s = stats_;
    if (vram_) s.experts = vram_stats(*vram_);
    return s;
  }
  void reset_stats() override {
    if (vram_) vram_->reset_counters();
    stats_ = {};
    stats_.timestamps = dev_->has_timestamps();
    stats_.layers.assign(static_cast<size_t>(n_gpu_), {});
  }
  void set_layer_sync(bool on) override { layer_sync_ = on; }
  std::string lost() const override { return dev_->lost(); }
  VramExperts* vram_experts() override { return vram_.get(); }

  int run_layers(FwdCtx& c) override {
    const int n = c.b.n;
    const double t_run = clock_s();
    const gpu::DeviceCounters k0 = dev_->counters();
    begin_pass(c);
    try {
      run_device_layers(c);
    } catch (...) {
      if (vram_) vram_->abort_pass();
      throw;
    }
    const gpu::DeviceCounters& k1 = dev_->counters();
    stats_.passes++;
    stats_.tokens += static_cast<uint64_t>(n);
    stats_.bytes_up += k1.bytes_up - k0.bytes_up;
    stats_.bytes_down += k1.bytes_down - k0.bytes_down;
    stats_.gpu_s += k1.gpu_s - k0.gpu_s;
    stats_.bus_s += k1.transfer_s - k0.transfer_s;
    stats_.run_s += clock_s() - t_run;
    return n_gpu_;
  }

 private:
  void run_device_layers(FwdCtx& c) {
    const ModelConfig& cfg = c.cfg;
    const int n = c.b.n, d = cfg.n_embd;
    if (vram_) vram_->begin_pass();
    for (int l = 0; l < n_gpu_; ++l) {
      const Mark m = mark();
      if (blocks_[l].attn) attention(c, l);
      else cpu_block(c, l, true);
      if (blocks_[l].ffn) {
        to_device(c);
        ops_.rmsnorm(x_, &layers_[l].ffn_norm, xn_, d, n, cfg.rms_eps);
        if (cfg.layers[l].ffn == FfnKind::Moe) moe(c, l);
        else glu(layers_[l], xn_, n, out_);
        ops_.add(x_, out_, int64_t{n} * d);
      } else {
        cpu_block(c, l, false);
      }
      if (layer_sync_) dev_->submit();
      end_layer(c, l, m);
    }
    to_host(c);  // the rows the CPU continues from (the output head, or the layers after n_gpu_)
    if (vram_) vram_->end_pass(*c.experts);  // the pass's promotions go up (the device is idle)
  }

  // Per-layer accounting: what the clocks and the device's counters said when the layer began.
  struct Mark {
    double t = 0, gpu = 0, bus = 0;
  };
  Mark mark() const { return {clock_s(), dev_->counters().gpu_s, dev_->counters().transfer_s}; }
  void end_layer(FwdCtx& c, int l, const Mark& m) {
    DeviceLayerTimes& t = stats_.layers[l];
    const double wall = clock_s() - m.t;
    t.wall_s += wall;
    t.gpu_s += dev_->counters().gpu_s - m.gpu;
    t.bus_s += dev_->counters().transfer_s - m.bus;
    if (c.layer_s) (*c.layer_s)[l] += wall;
  }

  GpuLayer upload_layer(const ModelConfig& cfg, const ModelWeights& w, int l) {
    const LayerConfig& lc = cfg.layers[l];
    GpuLayer g;
    for (const LayerTensor& t : layer_tensors(lc, w.layers[l], l, blocks_[l])) {
      if (t.mat) {
        g.*t.dm = gpu::upload_matrix(*dev_, *t.mat, t.name);
      } else {
        STRATA_CHECK(!t.vec->empty(), "--gpu vulkan: {} is missing", t.name);
        g.*t.buf = gpu::upload_f32(*dev_, t.vec->data, t.vec->n, t.name);
      }
    }
    if (!blocks_[l].attn) return g;  // the CPU's KV cache holds this layer's rows
    const std::string b = "blk." + std::to_string(l) + ".";
    const uint64_t rows = static_cast<uint64_t>(n_ctx_) * n_seq_;
    g.k_cache = dev_->alloc(rows * gpu::kv_row_bytes(type_k_, int64_t{lc.n_head_kv} * lc.head_dim_k), b + "k cache");
    g.v_cache = dev_->alloc(rows * gpu::kv_row_bytes(type_v_, int64_t{lc.n_head_kv} * lc.head_dim_v), b + "v cache");
    return g;
  }

  // y = W x for n rows of x, x first rounded as the CPU path quantizes activations for W's type
  // (kernels: its vec_dot_type), so the device's products are the CPU's within rounding: routers'
  // near-ties then fall the same way. A rounded copy is reused while nothing was written since
  // (the q, k and v products of one input).
  void mv(const gpu::DeviceMatrix& w, const gpu::Buffer& x, int n, const gpu::Buffer& y) {
    const GgmlType act = matmul_act_type(w.type);
    if (act == GgmlType::F32) {
      ops_.matvec(w, x, n, y);
      return;
    }
    if (xq_src_ != &x || xq_act_ != act || xq_cols_ != w.cols || xq_serial_ != dev_->serial()) {
      ops_.act_quant(x, xq_, w.cols, n, act);
      xq_src_ = &x, xq_act_ = act, xq_cols_ = w.cols;
    }
    ops_.matvec(w, xq_, n, y);
    xq_serial_ = dev_->serial();
  }

  // The hidden rows live on one side at a time: the host's st.x (after the embeddings and a CPU
  // block) or the device's x_ (after a device block); they cross the bus only when the other side
  // needs them.
  void to_device(FwdCtx& c) {
    if (!x_on_host_) return;
    dev_->upload(x_, 0, c.st.x.data(), static_cast<uint64_t>(c.b.n) * c.cfg.n_embd * 4);
    x_on_host_ = false;
  }
  void to_host(FwdCtx& c) {
    if (x_on_host_) return;
    dev_->download(x_, 0, c.st.x.data(), static_cast<uint64_t>(c.b.n) * c.cfg.n_embd * 4);
    x_on_host_ = true;
  }

  // A block the device does not run, on the CPU with the CPU path's code: x += attention or FFN
  // of rmsnorm(x), on the host's rows.
  void cpu_block(FwdCtx& c, int l, bool attn) {
    to_host(c);
    const double t0 = clock_s();
    Model::State& st = c.st;
    const int n = c.b.n, d = c.cfg.n_embd;
    const LayerWeights& lw = c.w.layers[l];
    const float* norm = attn ? lw.attn_norm.data : lw.ffn_norm.data;
    for (int i = 0; i < n; ++i) rmsnorm(st.x.data() + static_cast<size_t>(i) * d, norm, st.xn.data() + static_cast<size_t>(i) * d, d, c.cfg.rms_eps);
    if (attn) attention_block(c, l);
    else if (c.cfg.layers[l].ffn == FfnKind::Moe) ffn_moe(c, l);
    else ffn_dense(c, l);
    for (size_t x = 0; x < static_cast<size_t>(n) * d; ++x) st.x[x] += st.out[x];
    const double cpu = clock_s() - t0;
    stats_.layers[l].cpu_s += cpu;
    stats_.cpu_s += cpu;
  }

  // Positions, KV cells (row seq * n_ctx + pos) and sequence bases, scratch for n tokens, the
  // rotation table; the embeddings in st.x (they go up with the first device block).
  void begin_pass(FwdCtx& c) {
    const ModelConfig& cfg = c.cfg;
    const Batch& b = c.b;
    const int n = b.n, d = cfg.n_embd;
    STRATA_CHECK(n <= n_batch_, "--gpu vulkan: a pass of {} tokens, the executor's scratch holds {} (the engine's batch size)", n, n_batch_);
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
    x_on_host_ = true;
    dev_->upload(pos_b_, 0, pos_.data(), static_cast<uint64_t>(n) * 4);
    dev_->upload(cell_b_, 0, pos_.data() + n, static_cast<uint64_t>(n) * 4);
    dev_->upload(base_b_, 0, pos_.data() + 2 * n, static_cast<uint64_t>(n) * 4);
    if (rope0_ < 0) return;
    // Rotation angles on the host (rope_cache: YaRN, rope_freqs), one table for every layer.
    const int nd = cfg.layers[rope0_].rope.n_dims;
    RopeParams rp = rope_params(cfg.layers[rope0_].rope);
    if (!c.w.rope_freqs.empty()) rp.freq_factors = c.w.rope_freqs.data;
    cs_.resize(static_cast<size_t>(n) * nd);
    for (int i = 0; i < n; ++i) rope_cache(rp, static_cast<float>(b.pos[i]), cs_.data() + static_cast<size_t>(i) * nd);
    dev_->upload(cs_b_, 0, cs_.data(), cs_.size() * 4);
  }

  // x_ += attention(rmsnorm(x_)) of layer l.
  void attention(FwdCtx& c, int l) {
    to_device(c);
    const LayerConfig& lc = c.cfg.layers[l];
    const GpuLayer& g = layers_[l];
    const int n = c.b.n, d = c.cfg.n_embd;
    const float eps = c.cfg.rms_eps;
    ops_.rmsnorm(x_, &g.attn_norm, xn_, d, n, eps);
    if (lc.out_gate) {  // [n, n_head, (query | gate)]: the queries out, the gates stay in qg_
      mv(g.wq, xn_, n, qg_);
      ops_.strided_copy(qg_, q_, lc.head_dim_k, 2 * int64_t{lc.head_dim_k}, 0, int64_t{n} * lc.n_head);
    } else {
      mv(g.wq, xn_, n, q_);
    }
    mv(g.wk, xn_, n, k_);
    mv(g.wv, xn_, n, v_);
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
    ops_.kv_store(k_, cell_b_, g.k_cache, dk, n, type_k_);
    ops_.kv_store(v_, cell_b_, g.v_cache, int64_t{lc.n_head_kv} * lc.head_dim_v, n, type_v_);
    const gpu::AttnShape a{lc.n_head, lc.n_head_kv, lc.head_dim_k, lc.head_dim_v, n_keys_, lc.sliding_window, lc.kq_scale, n_ctx_ * n_seq_,
                           type_k_, type_v_};
    ops_.attention(q_, g.k_cache, g.v_cache, pos_b_, g.sinks ? &g.sinks : nullptr, attn_, scores_, a, n, &base_b_);
    if (lc.out_gate) ops_.mul_sigmoid(attn_, qg_, lc.head_dim_v, int64_t{n} * lc.n_head, 2 * int64_t{lc.head_dim_k}, lc.head_dim_k, true);
    mv(g.wo, attn_, n, out_);
    if (g.bo) ops_.add_bias(out_, g.bo, d, n);
    ops_.add(x_, out_, int64_t{n} * d);
  }

  // y [n, n_embd] = down(silu(gate(x)) * up(x)): the dense FFN or a shared expert.
  void glu(const GpuLayer& g, const gpu::Buffer& x, int n, const gpu::Buffer& y) {
    mv(g.gate, x, n, g_);
    mv(g.up, x, n, u_);
    ops_.swiglu(g_, u_, g_, n * g.gate.rows);
    mv(g.down, g_, n, y);
  }

  // out_ = routed experts + shared experts of MoE layer l on xn_. The router's product runs here;
  // the normalized rows and the router's product cross to the host, where the expert tier computes
  // the routed experts (streaming them under --ram-budget) while the device computes the shared
  // experts (submitted without waiting); the routed sum comes back. The CPU path's order: routed
  // sum, plus shared, then the residual add.
  void moe(FwdCtx& c, int l) {
    const GpuLayer& g = layers_[l];
    const int n = c.b.n, d = c.cfg.n_embd;
    const int64_t ne = c.cfg.layers[l].n_expert;
    mv(g.router, xn_, n, logits_);
    dev_->download(xn_, 0, c.st.xn.data(), static_cast<uint64_t>(n) * d * 4);
    dev_->download(logits_, 0, c.st.router.data(), static_cast<uint64_t>(n * ne) * 4);
    const bool shared = !g.gate.parts.empty();
    if (shared) {
      glu(g, xn_, n, sh_);
      if (g.shexp_gate_inp.rows) {  // Qwen3.5: sh *= sigmoid(x . w), one gate per token
        mv(g.shexp_gate_inp, xn_, n, logits_);  // the router's product is on the host by now
        ops_.mul_sigmoid(sh_, logits_, d, n, 1, 0, false);
      }
      // Overlap: the device's shared experts beside the host's routed ones (with a VRAM expert
      // cache, its claim submits them together with the routed experts it computes).
      if (!vram_) dev_->submit(false);
    }
    const double t0 = clock_s();
    c.offload = vram_.get();
    moe_routed_experts(c, l);
    c.offload = nullptr;
    const double cpu = clock_s() - t0;
    stats_.layers[l].cpu_s += cpu;
    stats_.cpu_s += cpu;
    dev_->upload(out_, 0, c.st.out.data(), static_cast<uint64_t>(n) * d * 4);  // out_ is not the shared experts' (sh_, g_, u_)
    if (shared) ops_.add(out_, sh_, int64_t{n} * d);
  }

  std::unique_ptr<gpu::Device> dev_;
  gpu::Ops ops_;
  int n_ctx_, n_seq_, n_batch_;
  GgmlType type_k_, type_v_;
  int n_gpu_;       // layers 0..n_gpu_-1 run here
  std::vector<VulkanBlocks> blocks_;  // [n_layer] which blocks the device runs
  int rope0_;       // the layer whose rotation table the device's attention uses (-1: none on the device)
  int n_keys_ = 0;  // KV rows the pass's attention reads (its largest position + 1)
  bool x_on_host_ = true;  // the pass's hidden rows: in c.st.x (true) or in x_
  bool layer_sync_ = false;
  const gpu::Buffer* xq_src_ = nullptr;  // what xq_ holds: this buffer rounded as act over rows of cols, as of serial
  GgmlType xq_act_ = GgmlType::F32;
  int64_t xq_cols_ = 0;
  uint64_t xq_serial_ = 0;
  DeviceStats stats_;
  std::unique_ptr<VramExperts> vram_;  // routed experts in VRAM (null: all on the CPU)
  std::vector<GpuLayer> layers_;
  gpu::Buffer x_, xn_, xq_, q_, qg_, k_, v_, attn_, out_, sh_, g_, u_, logits_, pos_b_, cell_b_, base_b_, cs_b_, scores_;
  std::vector<uint32_t> pos_;  // [positions | cells | bases] of the pass's tokens
  std::vector<float> cs_;
};

}  // namespace

std::unique_ptr<LayerExecutor> make_vulkan_executor(std::unique_ptr<gpu::Device> dev, const Model& model, VramShape shape, VramPlan* plan_out) {
  STRATA_CHECK(dev, "--gpu vulkan: no device");
  STRATA_CHECK(shape.n_ctx >= 1 && shape.n_seq >= 1 && shape.n_batch >= 1, "--gpu vulkan: context of {} positions, {} sequences, batch {}",
               shape.n_ctx, shape.n_seq, shape.n_batch);
  STRATA_CHECK(static_cast<uint64_t>(shape.n_ctx) * static_cast<uint64_t>(shape.n_seq) <= 0x7FFFFFFFull, "--gpu vulkan: {} sequences of {} positions",
               shape.n_seq, shape.n_ctx);
  const std::string why = vulkan_unsupported(model.config(), model.weights(), shape.type_k, shape.type_v);
  STRATA_CHECK(why.empty(), "--gpu vulkan: {}", why);
  if (shape.budget == 0) {
    shape.budget = default_vram_budget(dev->info().device_local_bytes);
    STRATA_CHECK(shape.budget > 0, "--gpu vulkan: {} has {} of device-local memory, no more than the reserve kept for others ({}); give --vram-budget",
                 dev->info().name, format_bytes(dev->info().device_local_bytes), format_bytes(kVramReserveMin));
  }
  shape.max_range = dev->max_range();
  shape.device = dev->info().name;
  const VramPlan plan = plan_vram(model.config(), model.weights(), shape);
  if (plan_out) *plan_out = plan;
  STRATA_CHECK(plan.gpu_layers > 0, "--gpu vulkan: {}", plan.note);
  return std::make_unique<VulkanExecutor>(std::move(dev), model, shape, plan);
}

}  // namespace strata
