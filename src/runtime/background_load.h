#pragma once
// BackgroundLoad: reads a model's files into memory on a thread of its own, at idle I/O priority,
// in chunks, populating the file mappings (MADV_POPULATE_READ; pread where the kernel lacks it),
// while the first tokens decode through the expert cache. A read error is kept and reported by
// error(), never thrown and never a SIGBUS (no page of the mapping is touched directly).
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace strata {

struct LoadHooks {
  std::function<void(uint64_t)> before_chunk;  // tests: called with the bytes done so far (may block)
  int fail_chunk = -1;                         // tests: this chunk (0-based, over all files) fails with EIO
};

// Brings [off, off + len) of `base` (a read-only mapping of `path`) into memory. Returns 0 or an errno.
int populate_range(const uint8_t* base, uint64_t off, uint64_t len, const std::string& path);

class BackgroundLoad {
 public:
  struct Region {
    const uint8_t* base = nullptr;  // the whole file's mapping
    uint64_t size = 0;
    std::string path;
  };
  BackgroundLoad(std::vector<Region> regions, LoadHooks hooks);
  ~BackgroundLoad();  // stops at the next chunk and joins
  BackgroundLoad(const BackgroundLoad&) = delete;
  BackgroundLoad& operator=(const BackgroundLoad&) = delete;

  bool done() const { return done_.load(std::memory_order_acquire); }
  void join();
  // After done(): empty when every byte was read.
  std::string error() const;
  uint64_t bytes_done() const { return bytes_done_.load(std::memory_order_relaxed); }
  double seconds() const { return seconds_; }  // after done()

 private:
  void run();
  std::vector<Region> regions_;
  LoadHooks hooks_;
  std::atomic<bool> stop_{false}, done_{false};
  std::atomic<uint64_t> bytes_done_{0};
  double seconds_ = 0;
  mutable std::mutex mu_;
  std::string error_;
  std::thread thread_;
};

}  // namespace strata
