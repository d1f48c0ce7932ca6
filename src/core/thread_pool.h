#pragma once
// A pool of threads created once. run() calls a function on every thread (the caller is
// thread 0) and returns when all are done; nothing is allocated per call.
#include <atomic>
#include <exception>
#include <cstdint>
#include <thread>
#include <vector>

namespace strata {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // fn(int thread_index) on every thread, thread_index in [0, size()). An exception on any thread
  // is rethrown here once every thread has returned (the first one, if several threw).
  template <typename F>
  void run(F&& fn) {
    using Fn = std::remove_reference_t<F>;
    dispatch([](void* ctx, int tid) { (*static_cast<Fn*>(ctx))(tid); }, const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // Splits [0, n) into size() contiguous ranges, fn(begin, end, thread_index); ranges are
  // multiples of `grain` except the last.
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    if (n <= 0) return;
    const int nt = n_threads_;
    const int64_t chunks = (n + grain - 1) / grain;
    if (nt == 1 || chunks == 1) {
      fn(int64_t{0}, n, 0);
      return;
    }
    run([&](int tid) {
      const int64_t c0 = chunks * tid / nt, c1 = chunks * (tid + 1) / nt;
      const int64_t b = c0 * grain, e = std::min<int64_t>(n, c1 * grain);
      if (b < e) fn(b, e, tid);
    });
  }

 private:
  using JobFn = void (*)(void*, int);
  void dispatch(JobFn fn, void* ctx);
  void worker(int tid);
  void keep_error(std::exception_ptr e);

  int n_threads_;
  std::vector<std::thread> threads_;
  JobFn job_ = nullptr;
  void* ctx_ = nullptr;
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};  // error_ holds the first exception of this run()
  std::exception_ptr error_;
};

// Number of threads to use by default: the machine's hardware threads.
int default_thread_count();

}  // namespace strata
