#include "runtime/expert_tier.h"
#include "runtime/model_copy.h"

#include <malloc.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "core/clock.h"
#include "core/error.h"
#include "core/page_size.h"
#include "core/units.h"
#include "experts/warm_stats.h"
#include "model/vram_experts.h"
#include "model/expert_layout.h"
#include "model/model_summary.h"

namespace strata {

namespace {
uint64_t status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(f, line))
    if (line.rfind(k, 0) == 0) return std::stoull(line.substr(k.size())) * 1024;
  return 0;
}
}  // namespace

uint64_t process_peak_rss() { return status_kb("VmHWM"); }
uint64_t process_rss() { return status_kb("VmRSS"); }

uint64_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<uint64_t>(m.uordblks) + static_cast<uint64_t>(m.hblkhd);
}

std::string MemoryPlan::describe() const {
  std::string s = fmt::format("memory plan{}: dense {} + KV cache {} + scratch {}", routed_only ? " (expert shard: no dense weights, no KV cache)" : "",
                              format_bytes(dense), format_bytes(kv), format_bytes(scratch));
  if (draft > 0) s += fmt::format(" + drafting {}", format_bytes(draft));
  s += fmt::format(" + logits {}", format_bytes(logits));
  if (vocab > 0) s += fmt::format(" + vocabulary {}", format_bytes(vocab));
  if (requests > 0) s += fmt::format(" + {} {}", routed_only ? "job buffers" : "requests", format_bytes(requests));
  if (!streaming)
    return s + fmt::format("; routed experts {} resident{}{}", format_bytes(experts_total), budget ? " (the whole model fits the budget)" : " (no --ram-budget)",
                           loaded_in_background ? fmt::format(" (read in the background in {:.1f} s while the first tokens streamed them)", load_s) : "");
  if (loading) s += " (resident model being read in the background; experts stream until it is)";
  if (!load_error.empty()) s += fmt::format(" (background load failed: {})", load_error);
  const std::string classes = size_classes > 1 ? fmt::format(" in {} size classes", size_classes) : "";
  if (dense_copied > 0) s += fmt::format(" (dense copied into process memory: {} in {:.1f} s)", format_bytes(dense_copied), dense_copy_s);
  return s + fmt::format(" + expert cache {} ({} slots{} for {} experts, {:.1f}% of {}) = {} of budget {}; I/O: {}", format_bytes(expert_cache), cache_slots,
                         classes, experts, experts_total ? 100.0 * static_cast<double>(expert_cache) / static_cast<double>(experts_total) : 0.0,
                         format_bytes(experts_total), format_bytes(total()), budget ? format_bytes(budget) : "none", io);
}

namespace {
uint64_t mem_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

uint64_t file_bytes(const Model& model) {
  uint64_t total = 0;
  for (const auto& part : model.gguf().parts()) total += part->size;
  return total;
}

// Whether at least 90 % of the model's file pages are in the page cache already (mincore).
bool mostly_in_memory(const Model& model) {
  const uint64_t page = page_size();
  uint64_t in = 0, all = 0;
  std::vector<unsigned char> v;
  for (const auto& part : model.gguf().parts()) {
    const uint64_t n = (part->size + page - 1) / page;
    v.assign(n, 0);
    if (n == 0 || ::mincore(const_cast<uint8_t*>(part->base), part->size, v.data()) != 0) return false;
    for (unsigned char c : v) in += c & 1;
    all += n;
  }
  return all > 0 && in * 10 >= all * 9;
}

}  // namespace

std::vector<std::vector<std::pair<uint64_t, uint64_t>>> dense_ranges(const Model& model) {
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> ranges(model.gguf().parts().size()), out(ranges.size());
  for (const auto& t : model.gguf().tensors())
    if (!is_routed_expert_tensor(t.name) && t.nbytes > 0) ranges[t.part].push_back({t.offset, t.offset + t.nbytes});
  for (size_t p = 0; p < ranges.size(); ++p) {
    auto& r = ranges[p];
    std::sort(r.begin(), r.end());
    for (size_t i = 0; i < r.size();) {
      uint64_t b = r[i].first, e = r[i].second;
      for (++i; i < r.size() && r[i].first <= e + (1u << 20); ++i) e = std::max(e, r[i].second);  // small gaps ride along
      out[p].push_back({b, e});
    }
  }
  return out;
}


uint64_t share_of(uint64_t bytes, double share) {
  STRATA_CHECK(share > 0 && share <= 1, "expert cache share {} is outside (0, 1]", share);
  return share >= 1 ? bytes : static_cast<uint64_t>(static_cast<double>(bytes) * share);
}

namespace {
// Every expert in a slot of its size class, plus the transient buffers (largest class).
uint64_t all_slot_bytes(const ExpertStore& store) {
  uint64_t all = kDefaultTransientSlots * align_up(store.max_slot_bytes(), io_align());
  for (int l = 0; l < store.n_layers(); ++l)
    if (store.is_moe(l)) all += static_cast<uint64_t>(store.layer(l).n_expert) * align_up(store.layer(l).slot_bytes, io_align());
  return all;
}
}  // namespace

// Resident weights: read the whole file into the page cache now (sequential readahead, the
// disk's best case), as llama.cpp does at load, instead of one page fault at a time during the
// first tokens. Skipped when the file would not fit in the memory available.
void ExpertTier::warm_resident(Model& model) {
  const uint64_t total = file_bytes(model);
  if (total + total / 8 > mem_available()) return;
  const double t0 = clock_s();
  for (const auto& part : model.gguf().parts()) {
    part->map.advise(0, part->size, MADV_WILLNEED);
    const volatile uint8_t* p = part->map.data();
    uint8_t sink = 0;
    for (uint64_t off = 0; off < part->size; off += page_size()) sink ^= p[off];
    (void)sink;
  }
  plan_.warm_s = clock_s() - t0;
}

void ExpertTier::go_resident(const TierOptions& opt) {
  if (opt.routed_only) return;  // reading the whole file would bring the dense weights in
  const uint64_t total = file_bytes(model_);
  const bool fits = total + total / 8 <= mem_available();
  if (opt.load == LoadMode::Wait || plan_.experts_total == 0 || !fits || (opt.load == LoadMode::Background && mostly_in_memory(model_))) {
    warm_resident(model_);
    return;
  }
  start_background_load(opt);
}

std::unique_ptr<IoBackend> ExpertTier::make_backend(const TierOptions& opt) {
  IoOptions io;
  io.queue_depth = opt.queue_depth;
  io.force_pread = opt.force_pread;
  std::string why;
  auto backend = opt.faults.active() ? make_faulty_backend(store_->files(), io, opt.faults) : make_io_backend(store_->files(), io, &why);
  if (!opt.model_copies.empty()) {
    std::vector<std::unique_ptr<IoBackend>> drives;
    std::vector<std::string> names{model_.gguf().path()};
    drives.push_back(std::move(backend));
    for (const std::string& copy : opt.model_copies) {
      drives.push_back(make_io_backend(checked_model_copy(model_.gguf(), copy), io, &why));
      names.push_back(copy);
    }
    backend = make_multi_drive_backend(std::move(drives), std::move(names));
  }
  plan_.io = backend->describe() + (why.empty() ? "" : " (" + why + ")");
  return backend;
}

// No load wait: the dense weights (small, every token needs them) are read now; routed experts
// stream through a small cache while a thread reads the whole file; poll_load() then switches
// to resident.
void ExpertTier::start_background_load(const TierOptions& opt) {
  const double t0 = clock_s();
  const auto ranges = dense_ranges(model_);
  for (size_t p = 0; p < ranges.size(); ++p) {
    const GgufFile& part = *model_.gguf().parts()[p];
    for (const auto& [b, e] : ranges[p])
      if (const int err = populate_range(part.base, b, e - b, part.path); err != 0)
        fail("reading the dense weights of {} ({} bytes at offset {}) failed: {}", part.path, e - b, b, std::strerror(err));
  }
  plan_.warm_s = clock_s() - t0;
  store_ = std::make_unique<ExpertStore>(expert_layout(model_.gguf(), model_.config(), model_.weights()));
  const uint64_t slot = align_up(store_->max_slot_bytes(), io_align());
  ExpertCacheOptions co;
  co.cache_bytes = std::min(all_slot_bytes(*store_), std::max(plan_.experts_total / 8, (kDefaultTransientSlots + 8) * slot));
  co.policy = opt.policy;
  cache_ = std::make_unique<ExpertCache>(*store_, make_backend(opt), co);
  plan_.streaming = plan_.loading = true;
  plan_.expert_cache = cache_->arena_bytes();
  plan_.cache_slots = cache_->n_slots();
  plan_.size_classes = cache_->n_size_classes();
  model_.set_expert_provider(cache_.get());
  std::vector<BackgroundLoad::Region> regions;
  for (const auto& part : model_.gguf().parts()) regions.push_back({part->base, part->size, part->path});
  loader_ = std::make_unique<BackgroundLoad>(std::move(regions), opt.load_hooks);
}

bool ExpertTier::poll_load() {
  if (!loader_ || !loader_->done()) return false;
  loader_->join();
  std::lock_guard<std::mutex> lk(plan_mu_);
  plan_.load_s = loader_->seconds();
  plan_.loading = false;
  if (std::string err = loader_->error(); !err.empty()) {
    plan_.load_error = err;
    std::fprintf(stderr, "warning: %s; experts keep streaming from the file\n", err.c_str());
    loader_.reset();
    return false;
  }
  loader_.reset();
  model_.set_expert_provider(nullptr);
  retired_ = cache_->counters();
  cache_.reset();
  store_.reset();
  plan_.streaming = false;
  plan_.loaded_in_background = true;
  plan_.expert_cache = 0;
  plan_.cache_slots = 0;
  return true;
}

ExpertTier::ExpertTier(Model& model, uint64_t kv_bytes, uint64_t scratch_bytes, const TierOptions& opt) : model_(model) {
  const ModelSummary sum = ModelSummary::of(model.gguf());
  plan_.budget = opt.ram_budget;
  plan_.dense = opt.routed_only ? 0 : sum.dense_bytes;
  plan_.routed_only = opt.routed_only;
  plan_.kv = kv_bytes;
  plan_.draft = opt.draft_bytes;
  plan_.logits = opt.logits_bytes;
  plan_.vocab = opt.vocab_bytes;
  plan_.requests = opt.request_bytes;
  plan_.experts_total = sum.routed_bytes;
  plan_.experts = sum.n_routed_experts;
  // Scratch: what the model's forward pass holds (Model::prepare allocated it before this plan),
  // the predictive policy's transition tables (n_layer x n_expert x n_expert floats), and an
  // allowance for the binary, heap and thread stacks.
  {
    const ModelConfig& cfg = model.config();
    uint64_t ne = 1;
    for (const auto& l : cfg.layers) ne = std::max<uint64_t>(ne, static_cast<uint64_t>(l.n_expert));
    const uint64_t policy = 4ull * static_cast<uint64_t>(cfg.layers.size() + cfg.nextn.size()) * ne * ne;
    plan_.scratch = kProcessAllowance + scratch_bytes + policy;
  }
  model.set_lookahead(opt.lookahead);
  const bool has_experts = sum.routed_bytes > 0;
  if (!has_experts || (opt.ram_budget == 0 && opt.cache_experts <= 0)) {  // resident
    go_resident(opt);
    return;
  }
  const uint64_t fixed = plan_.fixed();
  if (opt.ram_budget > 0 && fixed >= opt.ram_budget)
    fail("--ram-budget {} is too small: dense weights {} + KV cache {} + scratch {} + drafting {} + logits {} + vocabulary {} + requests {} = {} "
         "already exceed it (use a smaller -c, -b or --parallel, or a bigger budget)",
         format_bytes(opt.ram_budget), format_bytes(plan_.dense), format_bytes(plan_.kv), format_bytes(plan_.scratch), format_bytes(plan_.draft),
         format_bytes(plan_.logits), format_bytes(plan_.vocab), format_bytes(plan_.requests), format_bytes(fixed));
  store_ = std::make_unique<ExpertStore>(expert_layout(model.gguf(), model.config(), model.weights()));
  const uint64_t all_slots = all_slot_bytes(*store_);
  uint64_t cache_bytes = opt.ram_budget > 0 ? opt.ram_budget - fixed : UINT64_MAX;
  if (opt.cache_experts <= 0 && cache_bytes >= all_slots) {
    store_.reset();  // everything fits: resident, no streaming overhead
    go_resident(opt);
    return;
  }
  cache_bytes = std::min(cache_bytes, all_slots);
  plan_.experts_budget = cache_bytes;
  ExpertCacheOptions co;
  co.cache_bytes = share_of(cache_bytes, opt.cache_share);
  co.max_experts = opt.cache_experts > 0 ? std::max<int64_t>(1, std::llround(static_cast<double>(opt.cache_experts) * opt.cache_share)) : 0;
  co.policy = opt.policy;
  co.mlock = opt.mlock;
  cache_ = std::make_unique<ExpertCache>(*store_, make_backend(opt), co);
  plan_.streaming = true;
  plan_.expert_cache = cache_->arena_bytes();
  plan_.cache_slots = cache_->n_slots();
  plan_.size_classes = cache_->n_size_classes();
  // The warm fill starts now, on the cache's own thread: its reads overlap the dense copy below
  // and whatever comes before the first pass.
  if (opt.warm_start) start_warm(opt);
  // The mapping serves only the dense weights now: no readahead (it would pull neighbouring
  // expert bytes into the page cache, a second copy outside the budget), and the dense ranges
  // become process memory (same addresses): under the budget's pressure the kernel would
  // otherwise drop their page-cache pages and fault them back 4 KiB at a time.
  for (const auto& part : model.gguf().parts()) part->map.advise(0, part->size, MADV_RANDOM);
  const double t0 = clock_s();
  const auto ranges = opt.routed_only ? decltype(dense_ranges(model)){} : dense_ranges(model);
  for (size_t p = 0; p < ranges.size(); ++p)
    for (const auto& [b, e] : ranges[p]) plan_.dense_copied += model.gguf().parts()[p]->map.make_anonymous(b, e - b);
  plan_.dense_copy_s = clock_s() - t0;
  model.set_expert_provider(cache_.get());
}

void ExpertTier::start_warm(const TierOptions& opt) {
  const std::string dir = opt.stats_dir.empty() ? default_stats_dir() : opt.stats_dir;
  if (dir.empty()) {
    plan_.warm_note = "no statistics directory ($HOME unset)";
    return;
  }
  model_key_ = model_identity(model_.gguf());
  warm_path_ = warm_stats_path(dir, model_key_);
  const ExpertStats& st = cache_->stats();
  std::string why;
  auto ws = load_warm_stats(warm_path_, model_key_, st.n_layer(), st.n_expert(), &why);
  if (!ws) {
    plan_.warm_note = why.empty() ? "no statistics yet" : why;
    if (!why.empty()) std::fprintf(stderr, "warning: warm start: ignoring %s: %s\n", warm_path_.c_str(), why.c_str());
    return;
  }
  std::vector<int> k_used(static_cast<size_t>(st.n_layer()), 0);
  const ModelConfig& cfg = model_.config();
  for (size_t l = 0; l < k_used.size(); ++l) {
    const size_t n = cfg.layers.size();
    k_used[l] = l < n ? cfg.layers[l].n_expert_used : l - n < cfg.nextn.size() ? cfg.nextn[l - n].n_expert_used : 0;
  }
  cache_->seed_popularity(ws->weight, k_used);
  std::vector<ExpertKey> order = ws->ranked();
  warm_order_ = order;
  plan_.warm_queued = static_cast<int64_t>(order.size());
  cache_->warm(std::move(order), /*background=*/true);
}

int ExpertTier::warm_vram(VramExperts& vram) {
  if (!cache_ || warm_order_.empty()) return 0;
  std::vector<ExpertKey> pick;
  for (const ExpertKey& k : warm_order_) {
    if (static_cast<int>(pick.size()) >= vram.n_slots()) break;
    if (k.layer >= 0 && k.layer < model_.config().n_layer && vram.layout().eligible[k.layer] && k.expert >= 0 &&
        k.expert < model_.config().layers[k.layer].n_expert)
      pick.push_back(k);
  }
  if (vram.mode() == TierMode::exclusive) cache_->leave_to_faster_tier(pick);
  MappedExperts file(model_.weights());
  const int n = vram.warm(file, pick);
  const long page = ::sysconf(_SC_PAGESIZE);
  for (const ExpertKey& k : pick) {  // the mapping's pages were only a way in: release them
    const LayerWeights& lw = model_.weights().layers[k.layer];
    for (const ExpertTensor* t : {&lw.gate_exps, &lw.up_exps, &lw.down_exps}) {
      const auto a = reinterpret_cast<uintptr_t>(t->mapped(k.expert).data);
      const uintptr_t b = a / static_cast<uintptr_t>(page) * static_cast<uintptr_t>(page);
      ::madvise(reinterpret_cast<void*>(b), a + t->expert_bytes - b, MADV_DONTNEED);
    }
  }
  return n;
}

// Once per run (a second save would add the same counts again).
bool ExpertTier::save_warm_stats() {
  if (!cache_ || warm_path_.empty() || warm_saved_ || cache_->stats().accesses() == 0) return true;
  const ExpertStats& st = cache_->stats();
  std::vector<double> counts(static_cast<size_t>(st.n_layer()) * static_cast<size_t>(st.n_expert()));
  for (int l = 0; l < st.n_layer(); ++l)
    for (int e = 0; e < st.n_expert(); ++e) counts[static_cast<size_t>(l) * st.n_expert() + e] = static_cast<double>(st.cell({l, e}).accesses);
  try {
    strata::save_warm_stats(warm_path_, model_key_, st.n_layer(), st.n_expert(), counts);
    warm_saved_ = true;
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warning: warm start: %s\n", e.what());
    return false;
  }
}

ExpertTier::~ExpertTier() {
  save_warm_stats();
  if (cache_) model_.set_expert_provider(nullptr);
}

uint64_t ExpertTier::give_to_cache(uint64_t bytes) {
  bytes = std::min(bytes, plan_.draft);
  {
    std::lock_guard<std::mutex> lk(plan_mu_);
    plan_.draft -= bytes;
  }
  if (!cache_) return 0;
  const uint64_t added = cache_->grow(bytes);
  std::lock_guard<std::mutex> lk(plan_mu_);
  plan_.expert_cache += added;
  plan_.cache_slots = cache_->n_slots();
  return added;
}

}  // namespace strata
