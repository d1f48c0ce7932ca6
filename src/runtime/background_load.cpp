#include "runtime/background_load.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/clock.h"
#include "core/error.h"
#include "core/page_size.h"
#include "core/units.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

namespace strata {

namespace {
constexpr uint64_t kChunk = 64ull << 20;

// Idle I/O class for the calling thread (best effort: schedulers without classes ignore it).
void idle_io_priority() {
  constexpr int kWhoProcess = 1, kClassIdle = 3, kClassShift = 13;
  ::syscall(SYS_ioprio_set, kWhoProcess, 0, kClassIdle << kClassShift);
}

int pread_range(const std::string& path, uint64_t off, uint64_t len) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  std::vector<uint8_t> buf(std::min<uint64_t>(len, 8ull << 20));
  int err = 0;
  for (uint64_t done = 0; done < len && err == 0;) {
    const ssize_t n = ::pread(fd, buf.data(), std::min<uint64_t>(buf.size(), len - done), static_cast<off_t>(off + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    else if (n == 0) err = EIO;  // the file is shorter than its mapping
    else done += static_cast<uint64_t>(n);
  }
  ::close(fd);
  return err;
}
}  // namespace

int populate_range(const uint8_t* base, uint64_t off, uint64_t len, const std::string& path) {
  if (len == 0) return 0;
  const uint64_t page = page_size();
  const uint64_t b = off / page * page;
  uint8_t* p = const_cast<uint8_t*>(base) + b;
  ::madvise(p, off + len - b, MADV_WILLNEED);  // one large readahead instead of a fault's window at a time
  if (::madvise(p, off + len - b, MADV_POPULATE_READ) == 0) return 0;
  const int err = errno;
  if (err != EINVAL) return err == EFAULT ? EIO : err;  // EFAULT: the read behind the mapping failed
  return pread_range(path, off, len);                    // kernels before 5.14
}

BackgroundLoad::BackgroundLoad(std::vector<Region> regions, LoadHooks hooks) : regions_(std::move(regions)), hooks_(std::move(hooks)) {
  thread_ = std::thread([this] { run(); });
}

BackgroundLoad::~BackgroundLoad() {
  stop_.store(true);
  join();
}

void BackgroundLoad::join() {
  if (thread_.joinable()) thread_.join();
}

std::string BackgroundLoad::error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return error_;
}

void BackgroundLoad::run() {
  idle_io_priority();
  const double t0 = clock_s();
  int chunk = 0;
  for (const Region& r : regions_) {
    for (uint64_t off = 0; off < r.size && !stop_.load(); off += kChunk, ++chunk) {
      if (hooks_.before_chunk) hooks_.before_chunk(bytes_done_.load());
      const uint64_t len = std::min(kChunk, r.size - off);
      const int err = chunk == hooks_.fail_chunk ? EIO : populate_range(r.base, off, len, r.path);
      if (err != 0) {
        std::lock_guard<std::mutex> lk(mu_);
        error_ = fmt::format("reading {} in the background ({} at offset {}) failed: {}", r.path, format_bytes(len), off, std::strerror(err));
        break;
      }
      bytes_done_.fetch_add(len, std::memory_order_relaxed);
    }
    if (!error().empty()) break;
  }
  if (stop_.load() && error().empty()) {
    std::lock_guard<std::mutex> lk(mu_);
    error_ = "stopped";
  }
  seconds_ = clock_s() - t0;
  done_.store(true, std::memory_order_release);
}

}  // namespace strata
