#include "model/vram_experts.h"

#include <algorithm>
#include <cstring>

#include "core/clock.h"
#include "core/error.h"
#include "core/units.h"
#include "kernels/matmul.h"

namespace strata {

namespace {

uint64_t align_up(uint64_t v) { return (v + kVramExpertAlign - 1) / kVramExpertAlign * kVramExpertAlign; }

// Why layer l's routed experts cannot live in VRAM ("" when they can).
std::string ineligible(const LayerConfig& lc, const LayerWeights& lw, const VulkanBlocks& b) {
  if (lc.ffn != FfnKind::Moe || lw.gate_exps.empty()) return "no routed experts";
  if (!b.ffn) return "its FFN runs on the CPU";
  if (lc.act != GluAct::Silu) return "a GLU activation other than SiLU";
  if (!lw.gate_exps_b.empty() || !lw.up_exps_b.empty() || !lw.down_exps_b.empty()) return "expert biases";
  for (const ExpertTensor* t : {&lw.gate_exps, &lw.up_exps, &lw.down_exps})
    if (!gpu::matvec_supported(t->type)) return std::string("experts of type ") + ggml_type_name(t->type);
  return "";
}

}  // namespace

VramExpertLayout vram_expert_layout(const ModelConfig& cfg, const ModelWeights& w, const std::vector<VulkanBlocks>& blocks, int n_layers,
                                    int n_batch) {
  VramExpertLayout L;
  L.eligible.assign(static_cast<size_t>(cfg.n_layer), 0);
  L.offset.assign(static_cast<size_t>(cfg.n_layer), {0, 0, 0});
  int max_k = 0, max_e = 0;
  for (int l = 0; l < std::min(n_layers, cfg.n_layer); ++l) {
    const LayerConfig& lc = cfg.layers[l];
    const LayerWeights& lw = w.layers[l];
    const std::string why = ineligible(lc, lw, blocks[l]);
    if (!why.empty()) {
      if (L.why.empty() && why != "no routed experts") L.why = "layer " + std::to_string(l) + ": " + why;
      continue;
    }
    L.eligible[l] = 1;
    auto& o = L.offset[l];
    o[0] = 0;
    o[1] = align_up(lw.gate_exps.expert_bytes);
    o[2] = o[1] + align_up(lw.up_exps.expert_bytes);
    L.slot_bytes = std::max(L.slot_bytes, o[2] + align_up(lw.down_exps.expert_bytes));
    L.width_x = std::max<int64_t>(L.width_x, cfg.n_embd);
    L.width_f = std::max<int64_t>(L.width_f, lc.n_ff_exp);
    max_k = std::max(max_k, lc.n_expert_used);
    max_e = std::max(max_e, lc.n_expert);
  }
  if (!L.any()) {
    if (L.why.empty()) L.why = "no layer on the device has routed experts";
    return L;
  }
  L.why.clear();
  L.max_rows = int64_t{n_batch} * max_k;
  const uint64_t experts = static_cast<uint64_t>(std::min<int64_t>(L.max_rows, max_e));
  L.rows_bytes = static_cast<uint64_t>(L.max_rows) * static_cast<uint64_t>(L.width_x) * 4 + experts * kVramExpertAlign;
  L.quant_bytes = static_cast<uint64_t>(n_batch) * static_cast<uint64_t>(std::max(L.width_x, L.width_f)) * 4;
  L.ff_bytes = static_cast<uint64_t>(n_batch) * static_cast<uint64_t>(L.width_f) * 4;
  auto up4k = [](uint64_t v) { return (v + kVramPlanAlign - 1) / kVramPlanAlign * kVramPlanAlign; };
  L.staging_bytes = 2 * up4k(L.slot_bytes);
  L.scratch_bytes = 2 * up4k(L.rows_bytes) + up4k(L.quant_bytes) + 2 * up4k(L.ff_bytes) + L.staging_bytes;  // x, y; rounded rows; gate, up
  return L;
}

VramExperts::VramExperts(gpu::Device& dev, gpu::Ops& ops, const ModelConfig& cfg, const ModelWeights& w, VramExpertLayout layout,
                         const VramExpertOptions& o)
    : dev_(dev), ops_(ops), cfg_(cfg), w_(w), lay_(std::move(layout)), o_(o) {
  STRATA_CHECK(lay_.any(), "VRAM expert cache: {}", lay_.why);
  STRATA_CHECK(o_.mode != TierMode::exclusive_demote, "--tiers exclusive-demote is modelled by `strata cachesim --vram` only");
  for (const LayerConfig& lc : cfg.layers) n_expert_ = std::max(n_expert_, lc.n_expert);
  const uint64_t n_slots = o_.slot_bytes_total / lay_.slot_bytes;
  STRATA_CHECK(n_slots > 0, "VRAM expert cache: {} holds no expert slot of {}", format_bytes(o_.slot_bytes_total), format_bytes(lay_.slot_bytes));
  slots_per_slab_ = static_cast<int>(std::max<uint64_t>(1, kVramExpertSlab / lay_.slot_bytes));
  for (uint64_t s0 = 0; s0 < n_slots; s0 += static_cast<uint64_t>(slots_per_slab_)) {
    const uint64_t n = std::min<uint64_t>(static_cast<uint64_t>(slots_per_slab_), n_slots - s0);
    slabs_.push_back(dev_.alloc(n * lay_.slot_bytes, "VRAM expert slots " + std::to_string(s0) + ".." + std::to_string(s0 + n - 1)));
  }
  slot_owner_.assign(n_slots, ExpertKey{-1, -1});
  for (int s = static_cast<int>(n_slots) - 1; s >= 0; --s) free_slots_.push_back(s);
  slot_of_.assign(static_cast<size_t>(cfg.n_layer) * n_expert_, -1);
  ready_.assign(slot_of_.size(), 0);
  CacheBudget b;
  b.bytes = n_slots;  // unit shape: capacities are slot counts
  state_ = std::make_unique<ExpertCacheState>(CacheShape::unit(cfg.n_layer, n_expert_), b, make_policy(o_.policy));
  x_ = dev_.alloc(lay_.rows_bytes, "VRAM experts' gathered rows");
  y_ = dev_.alloc(lay_.rows_bytes, "VRAM experts' products");
  xq_ = dev_.alloc(lay_.quant_bytes, "VRAM experts' rounded activations");  // one expert's rows: at most a pass's tokens
  g_ = dev_.alloc(lay_.ff_bytes, "VRAM experts' gate");
  u_ = dev_.alloc(lay_.ff_bytes, "VRAM experts' up");
  for (int b = 0; b < 2; ++b) staging_[b] = dev_.alloc(lay_.slot_bytes, "VRAM experts' upload staging " + std::to_string(b));
  host_x_.resize(lay_.rows_bytes / 4);
  host_y_.resize(lay_.rows_bytes / 4);
}

bool VramExperts::holds(int layer, int e) const {
  return layer >= 0 && layer < cfg_.n_layer && lay_.eligible[layer] && e >= 0 && e < n_expert_ && ready_[idx(layer, e)];
}

bool VramExperts::uploaded(int layer, int e) const { return holds(layer, e); }

void VramExperts::begin_pass() {
  state_->begin_token(++clock_);
  c_.passes++;
}

void VramExperts::claim(FwdCtx& c, int layer, const ExpertGroups& g, uint8_t* away) {
  claimed_.clear();
  staged_.clear();
  rows_.clear();
  if (lay_.eligible[layer]) {
    const int ne = cfg_.layers[layer].n_expert;
    int32_t used[kMaxExperts];
    int n_used = 0;
    for (int e = 0; e < ne; ++e)
      if (g.counts[e]) used[n_used++] = e;
    state_->set_needed(layer, std::span<const int32_t>(used, static_cast<size_t>(n_used)));
    for (int i = 0; i < n_used; ++i) {
      const int e = used[i];
      if (ready_[idx(layer, e)]) {
        state_->access(ExpertKey{layer, e});
        c_.vram_hits++;
        away[e] = o_.mode == TierMode::inclusive ? kAwayCopy : kAway;
        claimed_.push_back(e);
        staged_.push_back(0);
        rows_.push_back(g.counts[e]);
        continue;
      }
      c_.cpu++;
      if (slot_of_[idx(layer, e)] < 0 && c.experts->in_memory(layer, e)) offer(ExpertKey{layer, e});  // a reuse
    }
    if (c.b.n > 1 && o_.pp != PpUpload::off) choose_pp(c, layer, g, used, n_used, away);
    if (!claimed_.empty()) compute(c, layer, g);
  }
  if (dev_.pending_dispatches() > 0) dev_.submit(false);  // the device's work beside the CPU's experts
  t_claimed_ = clock_s();
  gpu_at_claim_ = dev_.counters().gpu_s;
}

uint64_t VramExperts::expert_bytes(int layer) const {
  const LayerWeights& lw = w_.layers[layer];
  return lw.gate_exps.expert_bytes + lw.up_exps.expert_bytes + lw.down_exps.expert_bytes;
}

// Prompt processing by cost: of the experts the CPU would compute, those cheaper uploaded for this
// pass go to the device (kAwayCopy: the provider reads them as usual and take() uploads them).
void VramExperts::choose_pp(FwdCtx& c, int layer, const ExpertGroups& g, const int32_t* used, int n_used, uint8_t* away) {
  ExpertWork work[kMaxExperts];
  int32_t ids[kMaxExperts];
  int n = 0;
  for (int i = 0; i < n_used; ++i)
    if (away[used[i]] == kLocal) {
      ids[n] = used[i];
      work[n++] = ExpertWork{expert_bytes(layer), g.counts[used[i]]};
    }
  uint8_t up[kMaxExperts] = {};
  if (o_.pp == PpUpload::always) std::fill(up, up + n, uint8_t{1});
  else choose_uploads(rates_, std::span<const ExpertWork>(work, static_cast<size_t>(n)), std::span<uint8_t>(up, static_cast<size_t>(n)));
  (void)c;
  for (int i = 0; i < n; ++i) {
    if (!up[i]) continue;
    away[ids[i]] = kAwayCopy;
    claimed_.push_back(ids[i]);
    staged_.push_back(1);
    rows_.push_back(g.counts[ids[i]]);
  }
}

// A RAM hit offered to the VRAM policy: admitted, it takes a slot now and goes up at end_pass.
void VramExperts::offer(ExpertKey k) {
  if (pass_bytes_ + lay_.slot_bytes > o_.upload_per_pass) {
    c_.deferred++;
    return;
  }
  c_.offered++;
  Admission a;
  state_->access(k, &a);
  if (!a.admitted) return;
  for (const ExpertKey& v : a.evicted) {
    free_slot(v);
    c_.evictions++;
  }
  STRATA_CHECK(!free_slots_.empty(), "VRAM expert cache: an admission without a free slot (accounting error)");
  const int s = free_slots_.back();
  free_slots_.pop_back();
  slot_owner_[s] = k;
  slot_of_[idx(k.layer, k.expert)] = s;
  pending_.push_back({k, s});
  pass_bytes_ += lay_.slot_bytes;
}

void VramExperts::free_slot(ExpertKey k) {
  int32_t& s = slot_of_[idx(k.layer, k.expert)];
  if (s < 0) return;
  slot_owner_[s] = ExpertKey{-1, -1};
  free_slots_.push_back(s);
  s = -1;
  ready_[idx(k.layer, k.expert)] = 0;
  std::erase_if(pending_, [&](const Pending& p) { return p.key == k; });
}

gpu::MatrixView VramExperts::view(int layer, int part, const gpu::Buffer& buf, uint64_t base) const {
  const LayerWeights& lw = w_.layers[layer];
  const ExpertTensor& t = part == 0 ? lw.gate_exps : part == 1 ? lw.up_exps : lw.down_exps;
  gpu::MatrixView v;
  v.name = part == 0 ? "VRAM expert gate" : part == 1 ? "VRAM expert up" : "VRAM expert down";
  v.type = t.type;
  v.rows = t.rows;
  v.cols = t.cols;
  v.row_bytes = t.row_bytes;
  v.w = gpu::BufRange{&buf, base + lay_.offset[layer][part], static_cast<uint64_t>(t.rows) * t.row_bytes};
  return v;
}

gpu::MatrixView VramExperts::matrix(int layer, int slot, int part) const {
  const gpu::Buffer& slab = slabs_[static_cast<size_t>(slot / slots_per_slab_)];
  return view(layer, part, slab, static_cast<uint64_t>(slot % slots_per_slab_) * lay_.slot_bytes);
}

// The claimed experts' rows gathered (in the pass's order) and up; the products of those in VRAM
// slots recorded (the staged ones follow in take()).
void VramExperts::compute(FwdCtx& c, int layer, const ExpertGroups& g) {
  const int d = cfg_.n_embd;
  x_off_.clear();
  uint64_t off = 0;
  for (int e : claimed_) {
    const int m = g.counts[e];
    x_off_.push_back(off);
    float* dst = host_x_.data() + off / 4;
    for (int r = 0; r < m; ++r)
      std::memcpy(dst + static_cast<size_t>(r) * d, c.st.xn.data() + static_cast<size_t>(c.st.tok_of[g.starts[e] + r]) * d, sizeof(float) * d);
    off += align_up(static_cast<uint64_t>(m) * d * 4);
  }
  y_off_ = x_off_;  // the products have the rows' shape
  dev_.upload(x_, 0, host_x_.data(), off);
  for (size_t i = 0; i < claimed_.size(); ++i) {
    if (staged_[i]) continue;
    const int e = claimed_[i], slot = slot_of_[idx(layer, e)];
    products(layer, e, g.counts[e], i, slabs_[static_cast<size_t>(slot / slots_per_slab_)],
             static_cast<uint64_t>(slot % slots_per_slab_) * lay_.slot_bytes);
  }
}

// Expert e's m rows (claimed_[i]) from its matrices at `base` in `buf`: each input rounded as the
// CPU quantizes activations for the weight type, gate and up, SiLU GLU, down into its rows of y_.
void VramExperts::products(int layer, int e, int m, size_t i, const gpu::Buffer& buf, uint64_t base) {
  (void)e;
  const int d = cfg_.n_embd;
  const int64_t f = cfg_.layers[layer].n_ff_exp;
  auto product = [&](const gpu::MatrixView& w, const gpu::BufRange& x, const gpu::BufRange& y) {
    const GgmlType act = matmul_act_type(w.type);
    if (act == GgmlType::F32) {
      ops_.matvec(w, x, m, y);
      return;
    }
    const gpu::BufRange q{&xq_, 0, static_cast<uint64_t>(m) * static_cast<uint64_t>(w.cols) * 4};
    ops_.act_quant(x, q, w.cols, m, act);
    ops_.matvec(w, q, m, y);
  };
  const gpu::BufRange x{&x_, x_off_[i], static_cast<uint64_t>(m) * d * 4};
  const gpu::BufRange gr{&g_, 0, static_cast<uint64_t>(m * f) * 4}, ur{&u_, 0, static_cast<uint64_t>(m * f) * 4};
  product(view(layer, 0, buf, base), x, gr);
  product(view(layer, 1, buf, base), x, ur);
  ops_.swiglu(g_, u_, g_, m * f);
  product(view(layer, 2, buf, base), gr, gpu::BufRange{&y_, y_off_[i], static_cast<uint64_t>(m) * d * 4});
  c_.gpu_rows += static_cast<uint64_t>(m);
}

// A staged expert's bytes go up into the staging buffer the previous staged expert did not use (its
// upload overlaps that one's products: recording the next dispatch is what waits for them).
void VramExperts::take(FwdCtx& c, int layer, int e, const ExpertMats& m) {
  size_t i = 0;
  while (i < claimed_.size() && !(claimed_[i] == e && staged_[i])) ++i;
  if (i == claimed_.size()) return;  // an inclusive tier's copy: computed from its slot already
  const gpu::Buffer& buf = staging_[next_staging_];
  next_staging_ ^= 1;
  const double t0 = clock_s();
  const QMatrix* parts[3] = {&m.gate, &m.up, &m.down};
  uint64_t bytes = 0;
  for (int p = 0; p < 3; ++p) {
    const gpu::MatrixView v = view(layer, p, buf, 0);
    put(v, *parts[p], ExpertKey{layer, e});
    bytes += v.w.bytes;
  }
  rates_.observe_bus(bytes, clock_s() - t0);
  c_.pp_uploads++;
  c_.pp_upload_bytes += bytes;
  (void)c;
  products(layer, e, rows_[i], i, buf, 0);
  dev_.submit(false);
}

void VramExperts::finish(FwdCtx& c, int layer, const ExpertGroups& g, const uint8_t* away) {
  if (c.b.n > 1 && lay_.eligible[layer]) {  // the rates prompt processing's choice follows
    uint64_t cpu_rows = 0;
    for (int e = 0; e < cfg_.layers[layer].n_expert; ++e)
      if (g.counts[e] && away[e] == kLocal) cpu_rows += static_cast<uint64_t>(g.counts[e]);
    rates_.observe_cpu(cpu_rows * expert_bytes(layer), clock_s() - t_claimed_);
  }
  if (claimed_.empty()) return;
  const int d = cfg_.n_embd, k = cfg_.layers[layer].n_expert_used;
  const size_t last = claimed_.size() - 1;
  const uint64_t bytes = y_off_[last] + static_cast<uint64_t>(rows_[last]) * d * 4;
  dev_.download(y_, 0, host_y_.data(), bytes);  // waits for the device's products
  if (c.b.n > 1 && dev_.has_timestamps()) {
    uint64_t gpu_rows = 0;
    for (int r : rows_) gpu_rows += static_cast<uint64_t>(r);
    rates_.observe_gpu(gpu_rows * expert_bytes(layer), dev_.counters().gpu_s - gpu_at_claim_);
  }
  auto& st = c.st;
  for (size_t i = 0; i < claimed_.size(); ++i) {
    const int e = claimed_[i];
    const float* src = host_y_.data() + y_off_[i] / 4;
    for (int r = 0; r < rows_[i]; ++r, src += d) {
      const int t = st.tok_of[g.starts[e] + r], slot = st.slot_of[g.starts[e] + r];
      const size_t at = static_cast<size_t>(t) * k + slot;
      float* dst = st.slots.data() + at * d;
      const float wgt = st.sel_w[at];
      for (int j = 0; j < d; ++j) dst[j] = src[j] * wgt;
    }
  }
  claimed_.clear();
}

// One matrix of expert k into its place on the device (rows packed).
void VramExperts::put(const gpu::MatrixView& v, const QMatrix& q, ExpertKey k) {
  STRATA_CHECK(q.type == v.type && q.rows == v.rows && q.cols == v.cols, "VRAM expert cache: expert {} of layer {}: {} is {} [{} x {}], expected {} [{} x {}]",
               k.expert, k.layer, v.name, ggml_type_name(q.type), q.rows, q.cols, ggml_type_name(v.type), v.rows, v.cols);
  if (q.row_stride_bytes == v.row_bytes) {
    dev_.upload(*v.w.buf, v.w.offset, q.data, v.w.bytes);
    return;
  }
  std::vector<uint8_t> packed(v.w.bytes);  // not the usual layout (files pack expert rows)
  for (int64_t r = 0; r < q.rows; ++r) std::memcpy(packed.data() + static_cast<size_t>(r) * v.row_bytes, q.row(r), v.row_bytes);
  dev_.upload(*v.w.buf, v.w.offset, packed.data(), v.w.bytes);
}

void VramExperts::upload(ExpertKey k, int slot, const ExpertMats& m) {
  const QMatrix* parts[3] = {&m.gate, &m.up, &m.down};
  for (int p = 0; p < 3; ++p) {
    const gpu::MatrixView v = matrix(k.layer, slot, p);
    put(v, *parts[p], k);
    c_.upload_bytes += v.w.bytes;
  }
  ready_[idx(k.layer, k.expert)] = 1;
  c_.uploads++;
}

void VramExperts::end_pass(ExpertProvider& ram) {
  state_->clear_needed();
  if (pending_.empty()) return;
  const double t0 = clock_s();
  // In order; one that fails (a lost device) leaves itself and the rest for abort_pass to forget.
  while (!pending_.empty()) {
    const Pending p = pending_.front();
    ExpertMats m;
    if (!ram.peek(p.key.layer, p.key.expert, &m)) {  // RAM let it go during the pass
      state_->drop(p.key);
      free_slot(p.key);  // and out of pending_
      c_.cancelled++;
      continue;
    }
    upload(p.key, p.slot, m);
    pending_.erase(pending_.begin());
    if (o_.mode != TierMode::inclusive) ram.give_up(p.key.layer, p.key.expert);
  }
  pass_bytes_ = 0;
  c_.upload_s += clock_s() - t0;
}

void VramExperts::abort_pass() {
  for (const Pending& p : std::vector<Pending>(pending_)) {
    state_->drop(p.key);
    free_slot(p.key);
  }
  pending_.clear();
  claimed_.clear();
  pass_bytes_ = 0;
  state_->clear_needed();
}

int VramExperts::warm(ExpertProvider& ram, const std::vector<ExpertKey>& order) {
  int n = 0;
  for (const ExpertKey& k : order) {
    if (free_slots_.empty()) break;
    if (k.layer < 0 || k.layer >= cfg_.n_layer || !lay_.eligible[k.layer] || k.expert < 0 || k.expert >= cfg_.layers[k.layer].n_expert ||
        slot_of_[idx(k.layer, k.expert)] >= 0)
      continue;
    ExpertMats m;
    if (!ram.peek(k.layer, k.expert, &m) || !state_->place(k)) continue;
    const int s = free_slots_.back();
    free_slots_.pop_back();
    slot_owner_[s] = k;
    slot_of_[idx(k.layer, k.expert)] = s;
    upload(k, s, m);
    if (o_.mode != TierMode::inclusive) ram.give_up(k.layer, k.expert);
    ++n;
  }
  return n;
}

}  // namespace strata
