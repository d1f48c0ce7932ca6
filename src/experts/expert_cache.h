#pragma once
// The RAM tier of the expert store: an arena of slots sized by the budget (one size class per
// distinct expert size, each class a share of the arena in proportion to its bytes), filled by
// asynchronous O_DIRECT reads, with the bookkeeping and replacement decisions of
// ExpertCacheState + a CachePolicy. Kernels compute straight on the slot bytes (zero copy).
//
// Per layer: request() is called the moment the router has chosen; hits are pinned, misses
// get a slot (evicting by policy, never an expert in use or needed by this layer) and their
// reads are submitted in one batch. acquire_next() hands out experts in memory first, then
// misses as they land. Experts the policy does not admit are read into transient buffers.
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "experts/cache_state.h"
#include "experts/expert_provider.h"
#include "experts/expert_store.h"
#include "experts/io_backend.h"

namespace strata {

// Buffers (each the size of the largest slot) for experts the policy does not admit: they are
// read, used by the current layer and dropped. The memory plan reserves them too.
inline constexpr int kDefaultTransientSlots = 8;

struct ExpertCacheOptions {
  uint64_t cache_bytes = 0;     // bytes for slots (the budget left after dense weights, KV, scratch)
  int64_t max_experts = 0;      // > 0: at most this many cached experts (tests on tiny models)
  std::string policy = "default";
  bool per_layer = false;
  bool mlock = false;
  int transient_slots = 0;      // 0: kDefaultTransientSlots
  uint64_t prefetch_window = 0; // bytes of prefetch reads allowed in flight (0: 1/8 of the cache)
};

struct LayerProf {
  uint64_t hits = 0, misses = 0, bytes_read = 0;
  double wait_s = 0;            // blocked in acquire for I/O
};

struct ExpertCacheCounters {
  uint64_t hits = 0, misses = 0, transient = 0, bytes_read = 0, reads = 0;
  uint64_t prefetch_issued = 0, prefetch_used = 0, prefetch_wasted = 0;
  uint64_t demand_prefetched = 0;  // demanded experts that had been prefetched (recall numerator)
  uint64_t warm_issued = 0, warm_used = 0;  // warm-start fill: experts read, then demanded
  double wait_s = 0;
};

class ExpertCache final : public ExpertProvider {
 public:
  ExpertCache(const ExpertStore& store, std::unique_ptr<IoBackend> io, const ExpertCacheOptions& opt);
  // Bytes each drive has read (--model-copy: IoBackend::drive_bytes; empty with one drive).
  std::vector<uint64_t> drive_bytes() const { return io_ ? io_->drive_bytes() : std::vector<uint64_t>{}; }
  ~ExpertCache() override;

  void begin_batch(int n_tokens) override;
  void request(int layer, const int32_t* experts, int n) override;
  void prefetch(int layer, const int32_t* experts, int n) override;
  ExpertMats acquire(int layer, int e) override;
  int acquire_next(int layer, const int32_t* pending, int n, ExpertMats* out) override;
  bool try_acquire(int layer, int e, ExpertMats* out) override;
  void release(int layer, int e) override;
  void on_abort() override;
  bool in_memory(int layer, int e) const override { return holds(ExpertKey{layer, e}); }
  bool peek(int layer, int e, ExpertMats* out) override;
  void give_up(int layer, int e) override;
  uint64_t given_up() const { return given_up_; }
  // These experts live in a faster tier now: the warm fill skips them and copies in RAM are given up
  // (reads in flight for them land first).
  void leave_to_faster_tier(std::span<const ExpertKey> keys);
  // Warm start: reads these experts (hottest first) into free slots only, never evicting.
  // background = false: at most 16 reads (and the prefetch window) in flight; more are submitted
  // after each layer's demand reads (begin_batch, request), so on-demand reads go first.
  // background = true: before that, a thread of the cache's own keeps kWarmDeepBytes in flight
  // (the disk's best case: no demand read waits behind them yet) until the first call of any
  // other member (quiesce): the fill overlaps what the engine does before its first pass (the
  // dense weights' copy, the prompt's tokenization, a server waiting for its first request).
  void warm(std::vector<ExpertKey> order, bool background = false);
  bool warm_pending() const {
    quiesce();
    return warm_pos_ < warm_order_.size();
  }
  // Warm start: earlier runs' routing counts ([n_layer * n_expert], the stats' layout) as the
  // policy's prior popularity (CachePolicy::seed_popularity); experts_per_token: [n_layer].
  void seed_popularity(std::span<const double> weight, std::span<const int> experts_per_token);
  // The background fill has ended by itself (nothing left it could read); for tests.
  bool warm_thread_done() const { return warm_done_.load(std::memory_order_acquire); }
  // Waits until every page of the arena is faulted in (a background thread does it from the
  // construction on, and then the room grow() adds; with --mlock, or without
  // MADV_POPULATE_WRITE, the constructor did).
  void wait_populated();
  const uint8_t* arena() const { return arena_; }
  uint64_t arena_bytes() const { return arena_bytes_; }

  // Of `keys`, the experts this batch (the latest begin_batch) read into cache slots go to the
  // low-priority end: evicted first (ExpertCacheState::demote). Returns how many.
  int demote_fresh(std::span<const ExpertKey> keys);
  bool demoted(ExpertKey k) const {
    quiesce();
    return state_->demoted(k);
  }
  // Bytes this batch (the latest begin_batch) read for the expert: into a slot, a transient buffer,
  // ahead of demand or for the warm start; 0 when it was not read.
  uint64_t batch_read_bytes(ExpertKey k) const;
  // Whether the expert is in a cache slot or being read into one: a pass that needs it now reads
  // nothing more for it (a failed read is retried, so that one does not count).
  bool holds(ExpertKey k) const;
  // The bytes a read of the expert takes (its parts' 4 KiB-aligned ranges, as submit_reads reads
  // them); 0 outside the grid.
  uint64_t expert_read_bytes(ExpertKey k) const;

  const ExpertCacheCounters& counters() const {
    quiesce();
    return c_;
  }
  const std::vector<LayerProf>& layer_prof() const {
    quiesce();
    return prof_;
  }
  void reset_layer_prof();
  const ExpertStats& stats() const {
    quiesce();
    return state_->stats();
  }
  int n_slots() const { return static_cast<int>(slots_.size()); }
  // More room for slots (memory given back by a draft model): each size class gets the slots a
  // cache planned for the larger room would have, in a mapping of its own; resident experts and
  // what the policy learned stay; a warm start (warm()) goes on into the new free slots, a few
  // reads per pass as after its background fill; a default prefetch window grows with the cache. Returns the bytes added (whole slots; 0 when none fit or the
  // memory cannot be had).
  uint64_t grow(uint64_t bytes);
  uint64_t slot_bytes() const { return slot_bytes_; }  // the largest size class
  uint64_t prefetch_window() const { return opt_.prefetch_window; }
  int n_size_classes() const { return static_cast<int>(class_size_.size()); }
  uint64_t class_slot_bytes(int c) const { return class_size_[c]; }
  int class_slots(int c) const { return pool_slots_[c]; }
  std::string policy_name() const;

 private:
  enum class St : uint8_t { Absent, Loading, Ready, Failed };
  struct Entry {
    ExpertKey key;
    St st = St::Absent;
    int slot = -1;           // cache slot, or transient buffer index when transient
    bool transient = false;
    bool prefetched = false; // read ahead of demand, not yet used
    bool prefetch_io = false; // its prefetch read is in flight (counts against the window)
    bool warm_io = false;    // its warm-start read is in flight
    bool warmed = false;     // read by the warm start, not yet used
    bool demanded = false;   // requested by the current layer
    int ops_left = 0;
    uint64_t filled_at = 0;  // batch clock of its latest read into a slot
    int64_t error = 0;       // -errno of the first failed read
    int failed_part = -1;    // which part (gate/up/down) that read was for
    ReadOp ops[kExpertParts];
  };
  static Entry fresh_entry(ExpertKey k) {
    Entry e;
    e.key = k;
    return e;
  }
  size_t idx(int layer, int e) const { return static_cast<size_t>(layer) * n_expert_ + e; }
  uint8_t* slot_mem(int slot) const { return slot_mem_[static_cast<size_t>(slot)]; }
  uint64_t layer_slot_bytes(int layer) const { return class_size_[class_of_[layer]]; }
  int take_slot(int layer);  // a free slot of the layer's size class
  uint8_t* transient_mem(int t) const { return transient_ + static_cast<size_t>(t) * slot_bytes_; }
  void submit_reads(int layer, int e, Entry& en, uint8_t* mem);
  void reap(bool wait);
  void complete(ReadOp* op);
  ExpertMats views(int layer, int e, const Entry& en) const;
  [[noreturn]] void fail_read(int layer, int e, const Entry& en) const;
  void drop_slot(ExpertKey k);
  void pump_warm(uint64_t window);
  uint64_t shallow_warm_window() const;
  void warm_loop();
  // Stops the background warm fill (its reads in flight stay in flight, reaped as any other):
  // every public member that reads or changes the cache's state calls it first.
  void quiesce() const {
    if (warm_thread_.joinable()) [[unlikely]] stop_warm_thread();
  }
  void stop_warm_thread() const;
  // Construction steps, in order.
  std::vector<uint64_t> plan_size_classes();
  std::vector<uint64_t> plan_slots(const std::vector<uint64_t>& count, uint64_t room) const;
  void map_arena(uint64_t bytes);
  void start_populate();
  void populate_later(uint8_t* mem, uint64_t bytes);
  void lay_out_slots(const std::vector<uint64_t>& n_slots, int n_transient);
  void make_state(const std::vector<uint64_t>& n_slots);
  void start_transients();

  const ExpertStore& store_;
  std::unique_ptr<IoBackend> io_;
  ExpertCacheOptions opt_;
  std::unique_ptr<ExpertCacheState> state_;
  int n_expert_ = 0;
  uint64_t slot_bytes_ = 0;        // largest class (transient buffers have this size)
  std::vector<uint64_t> class_size_;  // [n_class] slot bytes, ascending
  std::vector<int> class_of_;     // [n_layer]
  std::vector<int> pool_slots_;   // [n_class] slots of each class
  std::vector<uint64_t> read_at_;  // [n_layer * n_expert] batch clock of the expert's latest read (0: none)
  std::vector<uint8_t*> slot_mem_;  // [n_slots] each slot's bytes (in the arena, or in a mapping grow() added)
  std::vector<std::pair<uint8_t*, uint64_t>> grown_;  // mappings grow() added
  uint64_t arena_bytes_ = 0;
  uint8_t* arena_ = nullptr;      // [class 0 slots | class 1 slots | ... | transients]
  uint64_t transient_start_ = 0;  // offset of the transients in the arena
  bool auto_window_ = false;       // ExpertCacheOptions::prefetch_window was 0: 1/8 of the cache, grow() included
  std::thread populate_thread_;   // faults the arena's pages in (start_populate), then grown room (populate_later)
  std::atomic<bool> populate_stop_{false};
  uint8_t* transient_ = nullptr;  // [n_transient * slot_bytes]
  std::vector<ExpertKey> slots_;  // owner of each slot (layer -1: free)
  std::vector<std::vector<int>> free_slots_;  // [n_class]
  std::vector<int> free_transient_;
  std::vector<ExpertKey> waiting_transient_;  // not admitted, waiting for a transient buffer
  std::vector<Entry> entries_;    // [n_layer * n_expert]
  std::vector<ExpertKey> pinned_; // pins taken by request(), dropped on release/abort
  uint64_t prefetch_inflight_ = 0;
  std::vector<ExpertKey> warm_order_;
  size_t warm_pos_ = 0;
  uint64_t warm_inflight_ = 0;
  mutable std::thread warm_thread_;      // background fill (warm(order, true)) until quiesce()
  mutable std::atomic<bool> warm_stop_{false};
  std::atomic<bool> warm_done_{false};
  uint64_t now_ = 0;
  uint64_t given_up_ = 0;  // experts whose slots went to a faster tier (give_up)
  std::vector<uint8_t> elsewhere_;  // [n_layer * n_expert] left to a faster tier: not warmed here
  ExpertCacheCounters c_;
  std::vector<LayerProf> prof_;
};

}  // namespace strata
