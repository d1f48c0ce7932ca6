#include "experts/expert_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/page_size.h"
#include "core/clock.h"

namespace strata {

namespace {
constexpr uint64_t kWarmWindowSlots = 16;  // warm-start reads in flight at most once passes run
constexpr uint64_t kWarmDeepBytes = 256ull << 20;  // before the first pass (background fill)
constexpr uint64_t kPopulateChunk = 64ull << 20;   // arena pages faulted in per step

uint64_t part_base(const ExpertLayer& L, int p) {
  uint64_t b = 0;
  for (int q = 0; q < p; ++q) b += align_up(L.part[q].stride, io_align()) + io_align();
  return b;
}
}  // namespace

ExpertCache::ExpertCache(const ExpertStore& store, std::unique_ptr<IoBackend> io, const ExpertCacheOptions& opt)
    : store_(store), io_(std::move(io)), opt_(opt) {
  for (int l = 0; l < store.n_layers(); ++l) n_expert_ = std::max(n_expert_, store.layer(l).n_expert);
  STRATA_CHECK(n_expert_ > 0, "expert cache: the model has no routed experts");
  const std::vector<uint64_t> count = plan_size_classes();
  const int n_transient = opt.transient_slots > 0 ? opt.transient_slots : kDefaultTransientSlots;
  const uint64_t transient_bytes = static_cast<uint64_t>(n_transient) * slot_bytes_;
  STRATA_CHECK(opt.cache_bytes >= transient_bytes + class_size_.front(),
               "expert cache: {} bytes hold no expert slot next to {} transient buffers of {} bytes (an expert needs {} to {} bytes)", opt.cache_bytes,
               n_transient, slot_bytes_, class_size_.front(), slot_bytes_);
  const std::vector<uint64_t> n_slots = plan_slots(count, opt.cache_bytes - transient_bytes);
  uint64_t slot_mem_total = 0;
  for (size_t c = 0; c < n_slots.size(); ++c) slot_mem_total += n_slots[c] * class_size_[c];
  transient_start_ = slot_mem_total;
  map_arena(slot_mem_total + transient_bytes);
  transient_ = arena_ + slot_mem_total;
  lay_out_slots(n_slots, n_transient);
  make_state(n_slots);
  auto_window_ = opt_.prefetch_window == 0;
  if (auto_window_) opt_.prefetch_window = std::max<uint64_t>(slot_bytes_, slot_mem_total / 8);
  if (!opt_.mlock) start_populate();  // last: nothing after it may throw
}

// Size classes: layers grouped by the slot size their experts need (published "dynamic" quants
// mix types per layer), each class with its own slots. Fills class_size_ (ascending),
// class_of_ and slot_bytes_; returns the number of experts of each class.
std::vector<uint64_t> ExpertCache::plan_size_classes() {
  const int n_layer = store_.n_layers();
  class_of_.assign(static_cast<size_t>(n_layer), 0);
  for (int l = 0; l < n_layer; ++l)
    if (store_.is_moe(l)) class_size_.push_back(align_up(store_.layer(l).slot_bytes, io_align()));
  std::sort(class_size_.begin(), class_size_.end());
  class_size_.erase(std::unique(class_size_.begin(), class_size_.end()), class_size_.end());
  std::vector<uint64_t> count(class_size_.size(), 0);
  for (int l = 0; l < n_layer; ++l) {
    if (!store_.is_moe(l)) continue;
    const uint64_t size = align_up(store_.layer(l).slot_bytes, io_align());
    class_of_[l] = static_cast<int>(std::lower_bound(class_size_.begin(), class_size_.end(), size) - class_size_.begin());
    count[class_of_[l]] += static_cast<uint64_t>(store_.layer(l).n_expert);
  }
  slot_bytes_ = class_size_.back();
  return count;
}

// Slots per class: each class gets the share of `room` its experts' bytes have (never more
// slots than it has experts); --cache-experts N then caps the total at N, split by expert count.
std::vector<uint64_t> ExpertCache::plan_slots(const std::vector<uint64_t>& count, uint64_t room) const {
  const size_t n_class = class_size_.size();
  unsigned __int128 all_bytes = 0;
  uint64_t all_count = 0;
  for (size_t c = 0; c < n_class; ++c) {
    all_bytes += static_cast<unsigned __int128>(count[c]) * class_size_[c];
    all_count += count[c];
  }
  std::vector<uint64_t> n_slots(n_class);
  for (size_t c = 0; c < n_class; ++c) {
    const unsigned __int128 share = static_cast<unsigned __int128>(room) * count[c] * class_size_[c] / all_bytes;
    n_slots[c] = std::min<uint64_t>(count[c], static_cast<uint64_t>(share / class_size_[c]));
  }
  if (opt_.max_experts > 0) {
    uint64_t left = static_cast<uint64_t>(opt_.max_experts);
    std::vector<uint64_t> want(n_class);
    for (size_t c = 0; c < n_class; ++c) left -= want[c] = static_cast<uint64_t>(opt_.max_experts) * count[c] / all_count;
    for (size_t c = 0; c < n_class && left > 0; ++c, --left) ++want[c];
    for (size_t c = 0; c < n_class; ++c) n_slots[c] = std::min(n_slots[c], want[c]);
  }
  return n_slots;
}

// One anonymous mapping for all slots and transient buffers; huge pages where the kernel offers
// them (fewer faults, fewer TLB misses while kernels stream slots), then touched once (or
// mlocked) so the first tokens do not pay the page faults.
void ExpertCache::map_arena(uint64_t bytes) {
  arena_bytes_ = bytes;
  void* mem = ::mmap(nullptr, arena_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  STRATA_CHECK(mem != MAP_FAILED, "expert cache: cannot map {} bytes: {}", arena_bytes_, std::strerror(errno));
  if (opt_.mlock && ::mlock(mem, arena_bytes_) != 0) {
    const int err = errno;
    ::munmap(mem, arena_bytes_);
    fail("expert cache: --mlock of {} bytes failed: {} (raise RLIMIT_MEMLOCK or drop --mlock)", arena_bytes_, std::strerror(err));
  }
  arena_ = static_cast<uint8_t*>(mem);
  ::madvise(arena_, arena_bytes_, MADV_HUGEPAGE);
}

// The arena's pages are faulted in before the reads need them, so the first tokens do not pay
// the page faults; on a virtual machine a first write to a page can cost more than reading it
// from disk (0.4-0.9 GB/s measured here), so this runs on its own thread, transient buffers
// first, then the slots in the order they are handed out (lowest first), not before the first
// pass. MADV_POPULATE_WRITE leaves the bytes alone, so reads may land while it runs. Kernels
// without it (before 5.14) get the pages touched here, before any read.
void ExpertCache::start_populate() {
  const uint64_t slot_end = transient_start_;
  const uint64_t first = std::min<uint64_t>(arena_bytes_ - slot_end, kPopulateChunk);  // of the transients
  if (::madvise(arena_ + slot_end, std::max<uint64_t>(first, 1), MADV_POPULATE_WRITE) != 0) {
    for (uint64_t off = 0; off < arena_bytes_; off += page_size()) static_cast<volatile uint8_t*>(arena_)[off] = 0;
    return;
  }
  populate_thread_ = std::thread([this, slot_end, first] {
    auto populate = [&](uint64_t a, uint64_t e) {
      for (uint64_t off = a; off < e && !populate_stop_.load(std::memory_order_relaxed); off += kPopulateChunk)
        ::madvise(arena_ + off, std::min(kPopulateChunk, e - off), MADV_POPULATE_WRITE);
    };
    populate(slot_end + first, arena_bytes_);
    populate(0, slot_end);
  });
}

// Grown room is faulted in the same way, off the pass that grew the cache (a few MiB cost up to
// 10 ms here), once the arena's own population is done; reads may land in it meanwhile.
void ExpertCache::populate_later(uint8_t* mem, uint64_t bytes) {
  std::thread before = std::move(populate_thread_);
  populate_thread_ = std::thread([this, before = std::move(before), mem, bytes]() mutable {
    if (before.joinable()) before.join();
    for (uint64_t off = 0; off < bytes && !populate_stop_.load(std::memory_order_relaxed); off += kPopulateChunk)
      ::madvise(mem + off, std::min(kPopulateChunk, bytes - off), MADV_POPULATE_WRITE);
  });
}

void ExpertCache::wait_populated() {
  if (populate_thread_.joinable()) populate_thread_.join();
}

// The slots of each class follow one another in the arena; all start free, lowest taken first.
void ExpertCache::lay_out_slots(const std::vector<uint64_t>& n_slots, int n_transient) {
  const size_t n_class = n_slots.size();
  uint64_t slot_total = 0;
  for (uint64_t n : n_slots) slot_total += n;
  slots_.assign(slot_total, ExpertKey{-1, -1});
  slot_mem_.resize(slot_total);
  free_slots_.assign(n_class, {});
  pool_slots_.assign(n_class, 0);
  uint64_t off = 0;
  int slot = 0;
  for (size_t c = 0; c < n_class; ++c) {
    for (uint64_t i = 0; i < n_slots[c]; ++i, ++slot, off += class_size_[c]) {
      slot_mem_[slot] = arena_ + off;
      free_slots_[c].push_back(slot);
    }
    std::reverse(free_slots_[c].begin(), free_slots_[c].end());
    pool_slots_[c] = static_cast<int>(n_slots[c]);
  }
  for (int t = n_transient - 1; t >= 0; --t) free_transient_.push_back(t);
}

// The bookkeeping: one pool per size class in ExpertCacheState, one Entry per (layer, expert).
void ExpertCache::make_state(const std::vector<uint64_t>& n_slots) {
  const int n_class = static_cast<int>(n_slots.size());
  CacheShape shape;
  shape.n_layer = store_.n_layers();
  shape.n_expert = n_expert_;
  shape.expert_bytes.assign(static_cast<size_t>(shape.n_layer), 0);
  for (int l = 0; l < shape.n_layer; ++l)
    if (store_.is_moe(l)) shape.expert_bytes[l] = class_size_[class_of_[l]];
  CacheBudget budget;
  for (int c = 0; c < n_class; ++c) budget.bytes += n_slots[c] * class_size_[c];
  budget.per_layer = opt_.per_layer;
  if (n_class > 1) {
    budget.class_of = class_of_;
    for (int c = 0; c < n_class; ++c) budget.class_bytes.push_back(n_slots[c] * class_size_[c]);
  }
  state_ = std::make_unique<ExpertCacheState>(shape, budget, make_policy(opt_.policy));
  entries_.resize(shape.size());
  read_at_.assign(shape.size(), 0);
  for (int l = 0; l < shape.n_layer; ++l)
    for (int e = 0; e < n_expert_; ++e) entries_[idx(l, e)].key = ExpertKey{l, e};
  prof_.assign(static_cast<size_t>(shape.n_layer), LayerProf{});
}

ExpertCache::~ExpertCache() {
  populate_stop_.store(true);
  wait_populated();
  quiesce();
  on_abort();
  io_.reset();
  if (arena_) ::munmap(arena_, arena_bytes_);
  for (const auto& [mem, bytes] : grown_) ::munmap(mem, bytes);
}

uint64_t ExpertCache::grow(uint64_t bytes) {
  quiesce();
  const size_t n_class = class_size_.size();
  std::vector<uint64_t> count(n_class, 0);
  for (int l = 0; l < store_.n_layers(); ++l)
    if (store_.is_moe(l)) count[class_of_[l]] += static_cast<uint64_t>(store_.layer(l).n_expert);
  uint64_t room = bytes, add = 0;
  for (size_t c = 0; c < n_class; ++c) room += static_cast<uint64_t>(pool_slots_[c]) * class_size_[c];
  const std::vector<uint64_t> want = plan_slots(count, room);
  std::vector<uint64_t> more(n_class, 0);
  for (size_t c = 0; c < n_class; ++c) {
    more[c] = want[c] > static_cast<uint64_t>(pool_slots_[c]) ? want[c] - static_cast<uint64_t>(pool_slots_[c]) : 0;
    add += more[c] * class_size_[c];
  }
  if (add == 0) return 0;
  void* mem = ::mmap(nullptr, add, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return 0;
  if (opt_.mlock && ::mlock(mem, add) != 0) {
    ::munmap(mem, add);
    return 0;
  }
  ::madvise(mem, add, MADV_HUGEPAGE);
  if (!opt_.mlock) populate_later(static_cast<uint8_t*>(mem), add);
  grown_.emplace_back(static_cast<uint8_t*>(mem), add);
  uint8_t* p = static_cast<uint8_t*>(mem);
  CacheBudget budget = state_->budget();
  budget.bytes += add;
  std::vector<int> fresh;
  for (size_t c = 0; c < n_class; ++c) {
    fresh.clear();
    for (uint64_t i = 0; i < more[c]; ++i, p += class_size_[c]) {
      fresh.push_back(static_cast<int>(slots_.size()));
      slots_.push_back(ExpertKey{-1, -1});
      slot_mem_.push_back(p);
    }
    free_slots_[c].insert(free_slots_[c].begin(), fresh.rbegin(), fresh.rend());  // taken from the back: the old free slots first
    pool_slots_[c] += static_cast<int>(more[c]);
    if (!budget.class_bytes.empty()) budget.class_bytes[c] += more[c] * class_size_[c];
  }
  state_->grow(budget);
  if (auto_window_) {  // 1/8 of the cache, as it is now
    uint64_t slot_mem_total = 0;
    for (size_t c = 0; c < n_class; ++c) slot_mem_total += static_cast<uint64_t>(pool_slots_[c]) * class_size_[c];
    opt_.prefetch_window = std::max<uint64_t>(slot_bytes_, slot_mem_total / 8);
  }
  warm_pos_ = 0;  // a warm start's ranked experts that did not fit go into the new room (free slots only)
  return add;
}

std::string ExpertCache::policy_name() const { return state_->policy().name(); }

void ExpertCache::reset_layer_prof() {
  quiesce();
  std::fill(prof_.begin(), prof_.end(), LayerProf{});
}

void ExpertCache::begin_batch(int) {
  quiesce();
  state_->begin_token(++now_);
  pump_warm(shallow_warm_window());
}

void ExpertCache::warm(std::vector<ExpertKey> order, bool background) {
  quiesce();
  warm_order_ = std::move(order);
  warm_pos_ = 0;
  if (!background) {
    pump_warm(shallow_warm_window());
    return;
  }
  warm_stop_.store(false);
  warm_done_.store(false);
  warm_thread_ = std::thread([this] { warm_loop(); });
}

void ExpertCache::seed_popularity(std::span<const double> weight, std::span<const int> experts_per_token) {
  quiesce();
  const size_t E = static_cast<size_t>(n_expert_);
  for (int l = 0; l < store_.n_layers(); ++l) {
    if (!store_.is_moe(l) || static_cast<size_t>(l) >= experts_per_token.size() || (l + 1) * E > weight.size()) continue;
    state_->policy().seed_popularity(l, weight.subspan(l * E, E), experts_per_token[l]);
  }
}

// The background fill: the deep window while nothing else uses the cache.
void ExpertCache::warm_loop() {
  while (!warm_stop_.load(std::memory_order_relaxed)) {
    pump_warm(kWarmDeepBytes);
    if (warm_inflight_ == 0) break;  // nothing left that fits
    reap(true);
  }
  warm_done_.store(true, std::memory_order_release);
}

void ExpertCache::stop_warm_thread() const {
  warm_stop_.store(true, std::memory_order_relaxed);
  warm_thread_.join();
}

// Once passes run: a few reads at a time, so a layer's demand reads never queue behind much of
// the fill.
uint64_t ExpertCache::shallow_warm_window() const { return std::min(opt_.prefetch_window, kWarmWindowSlots * slot_bytes_); }

void ExpertCache::pump_warm(uint64_t window) {
  if (warm_pos_ >= warm_order_.size()) return;
  if (warm_inflight_ > 0) reap(false);  // landed warm reads free the window
  for (; warm_pos_ < warm_order_.size(); ++warm_pos_) {
    const ExpertKey k = warm_order_[warm_pos_];
    if (k.layer < 0 || k.layer >= store_.n_layers() || !store_.is_moe(k.layer) || k.expert < 0 || k.expert >= store_.layer(k.layer).n_expert) continue;
    const uint64_t bytes = layer_slot_bytes(k.layer);
    if (warm_inflight_ + bytes > window) return;
    Entry& en = entries_[idx(k.layer, k.expert)];
    if (state_->resident(k) || en.transient || en.st != St::Absent) continue;
    if (!elsewhere_.empty() && elsewhere_[idx(k.layer, k.expert)]) continue;  // a faster tier holds it
    if (state_->pool_used(k.layer) + bytes > state_->pool_capacity(k.layer)) continue;  // free room only
    Admission adm = state_->admit(k, /*predicted=*/true);
    if (!adm.admitted) continue;
    for (const ExpertKey& v : adm.evicted) drop_slot(v);
    en.slot = take_slot(k.layer);
    slots_[en.slot] = k;
    en.transient = false;
    en.warmed = true;
    en.warm_io = true;
    warm_inflight_ += bytes;
    c_.warm_issued++;
    submit_reads(k.layer, k.expert, en, slot_mem(en.slot));
  }
}

void ExpertCache::submit_reads(int layer, int e, Entry& en, uint8_t* mem) {
  const ExpertLayer& L = store_.layer(layer);
  en.st = St::Loading;
  en.ops_left = kExpertParts;
  en.error = 0;
  en.failed_part = -1;
  for (int p = 0; p < kExpertParts; ++p) {
    const PartRead r = store_.part_read(layer, e, p);
    ReadOp& op = en.ops[p];
    op = ReadOp{};
    op.file = r.file;
    op.offset = r.aligned_offset;
    op.len = static_cast<uint32_t>(r.aligned_len);
    op.dst = mem + part_base(L, p);
    op.min_len = static_cast<uint32_t>(r.interior() + r.len);
    op.user = &en;
    c_.reads++;
    c_.bytes_read += r.aligned_len;
    prof_[layer].bytes_read += r.aligned_len;
  }
  if (!en.transient) {
    state_->pin(en.key);  // a slot being filled is never a victim
    en.filled_at = now_;
  }
  read_at_[idx(layer, e)] = now_;
  for (int p = 0; p < kExpertParts; ++p) io_->submit(&en.ops[p]);
}

void ExpertCache::complete(ReadOp* op) {
  Entry& en = *static_cast<Entry*>(op->user);
  if (op->result < 0 && en.error == 0) {
    en.error = op->result;
    en.failed_part = static_cast<int>(op - en.ops);
  }
  if (--en.ops_left > 0) return;
  en.st = en.error ? St::Failed : St::Ready;
  if (!en.transient) state_->unpin(en.key);
  if (en.prefetch_io) {  // counted until its read lands, even if demand used it meanwhile
    en.prefetch_io = false;
    prefetch_inflight_ -= std::min(prefetch_inflight_, layer_slot_bytes(en.key.layer));
  }
  if (en.warm_io) {
    en.warm_io = false;
    warm_inflight_ -= std::min(warm_inflight_, layer_slot_bytes(en.key.layer));
  }
}

void ExpertCache::reap(bool wait) {
  constexpr int kReapBatch = 64;  // completions taken per call
  ReadOp* done[kReapBatch];
  const int n = io_->reap(done, kReapBatch, wait);
  for (int i = 0; i < n; ++i) complete(done[i]);
}

void ExpertCache::drop_slot(ExpertKey k) {
  Entry& en = entries_[idx(k.layer, k.expert)];
  STRATA_CHECK(en.st != St::Loading && !en.transient && en.slot >= 0, "expert cache: evicting expert {}/{} in an invalid state", k.layer, k.expert);
  if (en.prefetched) c_.prefetch_wasted++;
  free_slots_[class_of_[k.layer]].push_back(en.slot);
  slots_[en.slot] = ExpertKey{-1, -1};
  en.st = St::Absent;
  en.slot = -1;
  en.prefetched = false;
  en.warmed = false;
}

int ExpertCache::take_slot(int layer) {
  auto& fl = free_slots_[class_of_[layer]];
  STRATA_CHECK(!fl.empty(), "expert cache: admission without a free slot in size class {} (accounting error)", class_of_[layer]);
  const int s = fl.back();
  fl.pop_back();
  return s;
}

void ExpertCache::start_transients() {
  while (!waiting_transient_.empty() && !free_transient_.empty()) {
    const ExpertKey k = waiting_transient_.front();
    waiting_transient_.erase(waiting_transient_.begin());
    Entry& en = entries_[idx(k.layer, k.expert)];
    en.slot = free_transient_.back();
    free_transient_.pop_back();
    submit_reads(k.layer, k.expert, en, transient_mem(en.slot));
  }
}

void ExpertCache::request(int layer, const int32_t* experts, int n) {
  quiesce();
  state_->set_needed(layer, std::span<const int32_t>(experts, static_cast<size_t>(n)));
  for (int i = 0; i < n; ++i) {
    const ExpertKey k{layer, experts[i]};
    Entry& en = entries_[idx(layer, experts[i])];
    en.demanded = true;
    if (state_->resident(k)) {
      state_->access(k);
      c_.hits++;
      prof_[layer].hits++;
      if (en.prefetched) {
        en.prefetched = false;
        c_.prefetch_used++;
        c_.demand_prefetched++;
      }
      if (en.warmed) {
        en.warmed = false;
        c_.warm_used++;
      }
      if (en.st == St::Failed) submit_reads(layer, k.expert, en, slot_mem(en.slot));
      state_->pin(k);
      pinned_.push_back(k);
      continue;
    }
    c_.misses++;
    prof_[layer].misses++;
    Admission adm;
    state_->access(k, &adm);
    for (const ExpertKey& v : adm.evicted) drop_slot(v);
    if (adm.admitted) {
      en.slot = take_slot(layer);
      slots_[en.slot] = k;
      en.transient = false;
      submit_reads(layer, k.expert, en, slot_mem(en.slot));
      state_->pin(k);
      pinned_.push_back(k);
    } else {
      c_.transient++;
      en.transient = true;
      en.st = St::Absent;
      waiting_transient_.push_back(k);
    }
  }
  start_transients();
  pump_warm(shallow_warm_window());
}

void ExpertCache::prefetch(int layer, const int32_t* experts, int n) {
  quiesce();
  state_->hint_predicted(layer, std::span<const int32_t>(experts, static_cast<size_t>(n)));
  for (int i = 0; i < n; ++i) {
    if (prefetch_inflight_ + layer_slot_bytes(layer) > opt_.prefetch_window) return;
    const ExpertKey k{layer, experts[i]};
    Entry& en = entries_[idx(layer, experts[i])];
    if (state_->resident(k) || en.transient || en.st != St::Absent) continue;
    Admission adm = state_->admit(k, /*predicted=*/true);
    if (!adm.admitted) continue;
    for (const ExpertKey& v : adm.evicted) drop_slot(v);
    en.slot = take_slot(layer);
    slots_[en.slot] = k;
    en.transient = false;
    en.prefetched = true;
    en.prefetch_io = true;
    prefetch_inflight_ += layer_slot_bytes(layer);
    c_.prefetch_issued++;
    submit_reads(layer, k.expert, en, slot_mem(en.slot));
  }
}

int ExpertCache::demote_fresh(std::span<const ExpertKey> keys) {
  quiesce();
  int n = 0;
  for (const ExpertKey& k : keys) {
    const Entry& en = entries_[idx(k.layer, k.expert)];
    if (!state_->resident(k) || en.transient || en.filled_at != now_) continue;
    state_->demote(k);
    ++n;
  }
  return n;
}

uint64_t ExpertCache::batch_read_bytes(ExpertKey k) const {
  quiesce();
  if (k.layer < 0 || k.layer >= store_.n_layers() || k.expert < 0 || k.expert >= n_expert_ || read_at_[idx(k.layer, k.expert)] != now_) return 0;
  return expert_read_bytes(k);
}

bool ExpertCache::peek(int layer, int e, ExpertMats* out) {
  quiesce();
  if (layer < 0 || layer >= store_.n_layers() || e < 0 || e >= n_expert_) return false;
  const Entry& en = entries_[idx(layer, e)];
  if (en.st != St::Ready || en.transient || en.slot < 0) return false;
  *out = views(layer, e, en);
  return true;
}

void ExpertCache::give_up(int layer, int e) {
  quiesce();
  if (layer < 0 || layer >= store_.n_layers() || e < 0 || e >= n_expert_) return;
  const ExpertKey k{layer, e};
  const Entry& en = entries_[idx(layer, e)];
  if (en.st != St::Ready || en.transient || en.slot < 0 || state_->pinned(k)) return;
  drop_slot(k);
  state_->drop(k);
  ++given_up_;
}

void ExpertCache::leave_to_faster_tier(std::span<const ExpertKey> keys) {
  quiesce();
  if (elsewhere_.empty()) elsewhere_.assign(entries_.size(), 0);
  for (const ExpertKey& k : keys) {
    if (k.layer < 0 || k.layer >= store_.n_layers() || k.expert < 0 || k.expert >= n_expert_) continue;
    elsewhere_[idx(k.layer, k.expert)] = 1;
    while (entries_[idx(k.layer, k.expert)].st == St::Loading) reap(true);
    give_up(k.layer, k.expert);
  }
}

bool ExpertCache::holds(ExpertKey k) const {
  quiesce();
  if (k.layer < 0 || k.layer >= store_.n_layers() || k.expert < 0 || k.expert >= n_expert_) return false;
  const Entry& en = entries_[idx(k.layer, k.expert)];
  return state_->resident(k) && !en.transient && en.st != St::Failed;
}

// The store's layout only (immutable): no quiesce needed.
uint64_t ExpertCache::expert_read_bytes(ExpertKey k) const {
  if (k.layer < 0 || k.layer >= store_.n_layers() || !store_.is_moe(k.layer) || k.expert < 0 || k.expert >= store_.layer(k.layer).n_expert) return 0;
  uint64_t n = 0;
  for (int p = 0; p < kExpertParts; ++p) n += store_.part_read(k.layer, k.expert, p).aligned_len;
  return n;
}

void ExpertCache::fail_read(int layer, int e, const Entry& en) const {
  const int p = std::clamp(en.failed_part, 0, kExpertParts - 1);  // set with the error
  const PartRead r = store_.part_read(layer, e, p);
  fail("layer {}, expert {}: reading its {} matrix (tensor '{}', {} bytes at offset {} of {}) failed after retries: {}", layer, e, expert_part_name(p),
       store_.layer(layer).part[p].tensor, r.len, r.offset, store_.files()[r.file], std::strerror(static_cast<int>(-en.error)));
}

ExpertMats ExpertCache::views(int layer, int e, const Entry& en) const {
  const ExpertLayer& L = store_.layer(layer);
  const uint8_t* mem = en.transient ? transient_mem(en.slot) : slot_mem(en.slot);
  QMatrix m[kExpertParts];
  for (int p = 0; p < kExpertParts; ++p) {
    const PartRead r = store_.part_read(layer, e, p);
    const ExpertPart& P = L.part[p];
    m[p] = QMatrix{P.type, P.rows, P.cols, mem + part_base(L, p) + r.interior(), static_cast<size_t>(P.row_bytes)};
  }
  return ExpertMats{m[0], m[1], m[2]};
}

int ExpertCache::acquire_next(int layer, const int32_t* pending, int n, ExpertMats* out) {
  quiesce();
  double waited = 0;
  for (;;) {
    bool loading = false;
    for (int i = 0; i < n; ++i) {
      Entry& en = entries_[idx(layer, pending[i])];
      if (en.st == St::Ready) {
        if (waited > 0) {
          c_.wait_s += waited;
          prof_[layer].wait_s += waited;
        }
        *out = views(layer, pending[i], en);
        return i;
      }
      if (en.st == St::Failed) fail_read(layer, pending[i], en);
      if (en.st == St::Loading) loading = true;
    }
    reap(false);
    bool progressed = false;
    for (int i = 0; i < n && !progressed; ++i) progressed = entries_[idx(layer, pending[i])].st != St::Loading &&
                                                             entries_[idx(layer, pending[i])].st != St::Absent;
    if (progressed) continue;
    STRATA_CHECK(loading || io_->in_flight() > 0, "expert cache: layer {} waits for experts that are not being read (internal error)", layer);
    const double t0 = clock_s();
    reap(true);
    waited += clock_s() - t0;
  }
}

bool ExpertCache::try_acquire(int layer, int e, ExpertMats* out) {
  quiesce();
  if (entries_[idx(layer, e)].st != St::Ready) reap(false);
  Entry& en = entries_[idx(layer, e)];
  if (en.st != St::Ready) return false;
  *out = views(layer, e, en);
  return true;
}

ExpertMats ExpertCache::acquire(int layer, int e) {
  quiesce();
  const int32_t p = e;
  ExpertMats m;
  acquire_next(layer, &p, 1, &m);
  return m;
}

void ExpertCache::release(int layer, int e) {
  quiesce();
  Entry& en = entries_[idx(layer, e)];
  en.demanded = false;
  if (en.transient) {
    free_transient_.push_back(en.slot);
    en = fresh_entry(ExpertKey{layer, e});
    start_transients();
    return;
  }
  const ExpertKey k{layer, e};
  for (size_t i = 0; i < pinned_.size(); ++i) {
    if (pinned_[i] == k) {
      pinned_[i] = pinned_.back();
      pinned_.pop_back();
      state_->unpin(k);
      break;
    }
  }
}

void ExpertCache::on_abort() {
  quiesce();
  while (io_ && io_->in_flight() > 0) reap(true);
  for (const ExpertKey& k : pinned_) state_->unpin(k);
  pinned_.clear();
  for (const ExpertKey& k : waiting_transient_) entries_[idx(k.layer, k.expert)] = fresh_entry(k);
  waiting_transient_.clear();
  for (auto& en : entries_) {
    if (en.transient) {
      if (en.slot >= 0) free_transient_.push_back(en.slot);
      en = fresh_entry(en.key);
    }
    en.demanded = false;
  }
  if (state_) state_->clear_needed();
}

}  // namespace strata
