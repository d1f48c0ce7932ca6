#pragma once
// Where the forward pass gets routed experts from. The MoE block tells the provider which
// experts a layer needs the moment its router has run (request), then acquires each one
// (blocking until its bytes are in memory) and releases it after its GEMM. The resident
// provider serves views into the mapped GGUF; the streaming tier (ExpertCache) serves slots
// of a budgeted RAM arena filled by async reads. Kernels read the bytes in place (zero copy).
#include <cstdint>

#include "gguf/qmatrix.h"

namespace strata {

struct ExpertMats {
  QMatrix gate, up, down;  // [n_ff_exp, n_embd], [n_ff_exp, n_embd], [n_embd, n_ff_exp]
};

class ExpertProvider {
 public:
  virtual ~ExpertProvider() = default;
  // The experts layer `layer` needs now (unique ids), in the order they will be acquired.
  virtual void request(int layer, const int32_t* experts, int n) = 0;
  // Experts predicted for a later layer; fetched at lower priority, may be ignored.
  virtual void prefetch(int layer, const int32_t* experts, int n) { (void)layer, (void)experts, (void)n; }
  // Blocks until expert `e` of `layer` is available.
  virtual ExpertMats acquire(int layer, int e) = 0;
  // Among pending[0..n) (all requested), waits for one that is available, preferring those
  // already in memory; returns its index in `pending` and its matrices. Lets computation start
  // on hits while misses are still arriving, then take each miss as it lands.
  virtual int acquire_next(int layer, const int32_t* pending, int n, ExpertMats* out) {
    (void)n;
    *out = acquire(layer, pending[0]);
    return 0;
  }
  // Non-blocking acquire: true (and the matrices) when expert `e` of `layer`, already
  // requested, is in memory now; false when it is still being read.
  virtual bool try_acquire(int layer, int e, ExpertMats* out) {
    *out = acquire(layer, e);
    return true;
  }
  virtual void release(int layer, int e) = 0;
  // For a faster tier above this one (a VRAM expert cache, model/vram_experts.h):
  // whether expert e of `layer` is in memory or being read now (a use would read nothing more);
  virtual bool in_memory(int layer, int e) const {
    (void)layer, (void)e;
    return true;
  }
  // its bytes when it is in memory now, not pinned (valid until the next call into the provider);
  // false when it is not;
  virtual bool peek(int layer, int e, ExpertMats* out) {
    *out = acquire(layer, e);
    release(layer, e);
    return true;
  }
  // and giving up its memory: it moved to the faster tier (read again when next needed here).
  virtual void give_up(int layer, int e) { (void)layer, (void)e; }
  // A forward pass failed midway: drop every pin and wait for reads in flight.
  virtual void on_abort() {}
  // A new forward pass (token clock for the cache policy).
  virtual void begin_batch(int n_tokens) { (void)n_tokens; }
};

}  // namespace strata
