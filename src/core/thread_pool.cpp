#include "core/thread_pool.h"

#include "core/spin_pause.h"

#include "core/error.h"

namespace strata {

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads) {
  STRATA_CHECK(n_threads >= 1 && n_threads <= 1024, "thread count {} out of range [1, 1024]", n_threads);
  for (int t = 1; t < n_threads_; ++t) threads_.emplace_back([this, t] { worker(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::dispatch(JobFn fn, void* ctx) {
  if (n_threads_ == 1) {
    fn(ctx, 0);
    return;
  }
  job_ = fn;
  ctx_ = ctx;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  try {
    fn(ctx, 0);
  } catch (...) {
    keep_error(std::current_exception());
  }
  // Every thread finishes (they use ctx) before an exception leaves. Spin briefly (work items are short), then sleep on the counter.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < 4096) {
      spin_pause();
    } else {
      int p = pending_.load(std::memory_order_acquire);
      if (p != 0) pending_.wait(p, std::memory_order_acquire);
    }
  }
  if (failed_.load(std::memory_order_acquire)) {
    std::exception_ptr e = std::move(error_);
    error_ = nullptr;
    failed_.store(false, std::memory_order_relaxed);
    std::rethrow_exception(e);
  }
}

void ThreadPool::keep_error(std::exception_ptr e) {
  bool expected = false;
  if (failed_.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) error_ = std::move(e);  // the first one wins
}

void ThreadPool::worker(int tid) {
  uint32_t seen = 0;  // the generation at construction: a dispatch may precede this thread's start
  for (;;) {
    uint32_t g;
    for (int spin = 0; (g = generation_.load(std::memory_order_acquire)) == seen; ++spin) {
      if (spin < 4096) spin_pause();
      else generation_.wait(seen, std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load()) return;
    try {
      job_(ctx_, tid);
    } catch (...) {  // thrown to the caller of run(), not std::terminate
      keep_error(std::current_exception());
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

int default_thread_count() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

}  // namespace strata
