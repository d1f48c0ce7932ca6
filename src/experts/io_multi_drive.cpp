// Several drives, each with a byte-identical copy of the model (--model-copy): one backend (I/O
// queue) per drive; each read goes to the drive with the fewest bytes in flight, and a drive whose
// read fails (after its own retries) leaves the rotation with a warning: the read is sent again to
// another drive, and only the last drive's failures reach the caller.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <thread>

#include "core/error.h"
#include "experts/io_backend.h"

namespace strata {
namespace {

class MultiDrive final : public IoBackend {
 public:
  MultiDrive(std::vector<std::unique_ptr<IoBackend>> d, std::vector<std::string> names)
      : drives_(std::move(d)), names_(std::move(names)), bytes_(drives_.size(), 0), read_(drives_.size(), 0), alive_(drives_.size(), 1) {}

  std::string describe() const override {
    std::string s = fmt::format("{} drives:", drives_.size());
    for (size_t i = 0; i < drives_.size(); ++i) s += fmt::format(" [{}: {}]", names_[i], drives_[i]->describe());
    return s;
  }
  bool direct() const override {
    for (const auto& d : drives_)
      if (!d->direct()) return false;
    return true;
  }
  void submit(ReadOp* op) override { drives_[pick()]->submit(op), bytes_[last_] += op->len; }

  int reap(ReadOp** out, int max, bool wait) override {
    constexpr int kBatch = 64;
    ReadOp* buf[kBatch];
    for (int spins = 0;; ++spins) {
      int got = 0;
      for (size_t i = 0; i < drives_.size() && got < max; ++i) {
        if (drives_[i]->in_flight() == 0) continue;
        const int n = drives_[i]->reap(buf, std::min(max - got, kBatch), false);
        for (int j = 0; j < n; ++j) {
          bytes_[i] -= buf[j]->len;
          if (buf[j]->result >= 0) read_[i] += static_cast<uint64_t>(buf[j]->result), out[got++] = buf[j];
          else retire(i, buf[j]);
        }
      }
      if (got > 0 || !wait || in_flight() == 0) return got;
      // Nothing landed yet: poll the drives again (a wait on one would miss the others' completions).
      if (spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  std::vector<uint64_t> drive_bytes() const override { return read_; }

  int in_flight() const override {
    int n = 0;
    for (const auto& d : drives_) n += d->in_flight();
    return n;
  }

 private:
  // The live drive with the fewest bytes in flight (ties: the lower index).
  size_t pick() {
    size_t best = drives_.size();
    for (size_t i = 0; i < drives_.size(); ++i)
      if (alive_[i] && (best == drives_.size() || bytes_[i] < bytes_[best])) best = i;
    STRATA_CHECK(best < drives_.size(), "expert reads: no drive left");
    return last_ = best;
  }

  // A read from drive i failed: i leaves the rotation (when another drive is left) and the read
  // goes to another one; with none left it fails as it would with one drive.
  void retire(size_t i, ReadOp* op) {
    int left = 0;
    for (size_t k = 0; k < drives_.size(); ++k) left += alive_[k] && k != i;
    if (left == 0) fail("expert read of {} bytes at offset {} failed on the last drive ({}): {}", op->len, op->offset, names_[i], std::strerror(static_cast<int>(-op->result)));
    if (alive_[i]) {
      alive_[i] = 0;
      std::fprintf(stderr, "warning: expert reads from %s failed (%s); reading from the other copies\n", names_[i].c_str(),
                   std::strerror(static_cast<int>(-op->result)));
    }
    op->result = 0, op->done = 0, op->attempts = 0, op->calls = 0;
    submit(op);
  }

  std::vector<std::unique_ptr<IoBackend>> drives_;
  std::vector<std::string> names_;
  std::vector<uint64_t> bytes_, read_;  // per drive: bytes in flight, bytes read
  std::vector<uint8_t> alive_;
  size_t last_ = 0;
};

}  // namespace

std::unique_ptr<IoBackend> make_multi_drive_backend(std::vector<std::unique_ptr<IoBackend>> drives, std::vector<std::string> names) {
  STRATA_CHECK(!drives.empty() && drives.size() == names.size(), "expert reads: {} drives, {} names", drives.size(), names.size());
  return std::make_unique<MultiDrive>(std::move(drives), std::move(names));
}

}  // namespace strata
