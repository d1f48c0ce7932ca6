#include "experts/io_backend.h"

#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>

#include "core/error.h"

namespace strata {
namespace {

std::vector<int> open_files(const std::vector<std::string>& files, bool direct, std::string* err) {
  std::vector<int> fds;
  for (const auto& f : files) {
    int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
    if (fd < 0) {
      if (err) *err = fmt::format("{}: open{} failed: {}", f, direct ? " with O_DIRECT" : "", std::strerror(errno));
      for (int x : fds) ::close(x);
      return {};
    }
    fds.push_back(fd);
  }
  return fds;
}

// Shared retry logic: returns true when the op is finished (success or final failure).
// `attempts` counts consecutive failures (reset by progress); `calls` bounds the whole effort.
bool settle(ReadOp* op, int64_t res, int max_attempts) {
  op->calls++;
  if (res < 0) {
    op->attempts++;
    if ((res == -EIO || res == -EAGAIN || res == -EINTR) && op->attempts < max_attempts && op->calls < 64) return false;
    op->result = res;
    return true;
  }
  op->attempts = 0;
  op->done += static_cast<uint32_t>(res);
  if (op->done >= op->len) {
    op->result = op->done;
    return true;
  }
  if (res == 0) {  // end of file
    op->result = op->done >= op->min_len ? static_cast<int64_t>(op->done) : -EIO;
    return true;
  }
  if (op->calls >= 64) {  // short reads keep coming: give up
    op->result = op->done >= op->min_len ? static_cast<int64_t>(op->done) : -EIO;
    return true;
  }
  return false;  // short read: continue from op->done
}

class UringBackend final : public IoBackend {
 public:
  // Returns nullptr (and the reason) when io_uring cannot be set up.
  static std::unique_ptr<UringBackend> create(std::vector<int> fds, const IoOptions& opt, std::string* why) {
    std::unique_ptr<UringBackend> b(new UringBackend(std::move(fds), opt));
    const int rc = io_uring_queue_init(static_cast<unsigned>(std::max(8, opt.queue_depth)), &b->ring_, 0);
    if (rc != 0) {
      if (why) *why = fmt::format("io_uring_queue_init failed: {}", std::strerror(-rc));
      return nullptr;  // destructor closes the fds
    }
    b->ready_ = true;
    return b;
  }
  ~UringBackend() override {
    // Drain what is in flight so no kernel write lands in freed memory.
    while (ready_ && inflight_ > 0) {
      io_uring_cqe* cqe = nullptr;
      if (io_uring_wait_cqe(&ring_, &cqe) != 0) break;
      io_uring_cqe_seen(&ring_, cqe);
      --inflight_;
    }
    if (ready_) io_uring_queue_exit(&ring_);
    for (int fd : fds_) ::close(fd);
  }
  std::string describe() const override { return fmt::format("io_uring + O_DIRECT, queue depth {}", opt_.queue_depth); }
  bool direct() const override { return true; }
  int in_flight() const override { return inflight_ + static_cast<int>(backlog_.size()); }

  void submit(ReadOp* op) override {
    backlog_.push_back(op);
    pump();
  }

  int reap(ReadOp** out, int max, bool wait) override {
    int n = 0;
    while (n < max) {
      io_uring_cqe* cqe = nullptr;
      int rc = (wait && n == 0 && inflight_ > 0) ? io_uring_wait_cqe(&ring_, &cqe) : io_uring_peek_cqe(&ring_, &cqe);
      if (rc != 0 || !cqe) break;
      ReadOp* op = static_cast<ReadOp*>(io_uring_cqe_get_data(cqe));
      const int64_t res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      --inflight_;
      if (settle(op, res, opt_.max_attempts)) out[n++] = op;
      else backlog_.push_front(op);  // retry / continue first
      pump();
    }
    return n;
  }

 private:
  void pump() {
    bool any = false;
    while (!backlog_.empty() && inflight_ < opt_.queue_depth) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (!sqe) break;
      ReadOp* op = backlog_.front();
      backlog_.pop_front();
      // O_DIRECT continuation after a short read stays aligned: short reads end on sector bounds.
      io_uring_prep_read(sqe, fds_[op->file], op->dst + op->done, op->len - op->done, op->offset + op->done);
      io_uring_sqe_set_data(sqe, op);
      ++inflight_;
      any = true;
    }
    if (any) io_uring_submit(&ring_);
  }

  UringBackend(std::vector<int> fds, const IoOptions& opt) : fds_(std::move(fds)), opt_(opt) {}
  std::vector<int> fds_;
  IoOptions opt_;
  io_uring ring_{};
  bool ready_ = false;
  int inflight_ = 0;
  std::deque<ReadOp*> backlog_;
};

using ReadFn = std::function<int64_t(int fd, uint8_t* dst, uint64_t len, uint64_t off)>;

int64_t sys_pread(int fd, uint8_t* dst, uint64_t len, uint64_t off) {
  ssize_t r = ::pread(fd, dst, len, static_cast<off_t>(off));
  return r < 0 ? -errno : r;
}

class PreadBackend final : public IoBackend {
 public:
  PreadBackend(std::vector<int> fds, const IoOptions& opt, bool direct, ReadFn fn = sys_pread)
      : fds_(std::move(fds)), opt_(opt), direct_(direct), read_(std::move(fn)) {
    const int n = std::max(1, opt.pread_threads);
    for (int t = 0; t < n; ++t) threads_.emplace_back([this] { worker(); });
  }
  ~PreadBackend() override {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    for (int fd : fds_) ::close(fd);
  }
  std::string describe() const override {
    return fmt::format("pread thread pool ({} threads{})", threads_.size(), direct_ ? ", O_DIRECT" : ", buffered");
  }
  bool direct() const override { return direct_; }
  // Submitted and not yet reaped: a finished read waiting in done_ still counts, or a caller
  // draining with `while (in_flight()) reap(true)` would stop early, reset the op's owner, and
  // the op would be reaped later into the reset owner.
  int in_flight() const override {
    std::lock_guard<std::mutex> g(mu_);
    return pending_ + static_cast<int>(done_.size());
  }
  void submit(ReadOp* op) override {
    {
      std::lock_guard<std::mutex> g(mu_);
      queue_.push_back(op);
      ++pending_;
    }
    cv_.notify_one();
  }
  int reap(ReadOp** out, int max, bool wait) override {
    std::unique_lock<std::mutex> lk(mu_);
    if (wait) done_cv_.wait(lk, [&] { return !done_.empty() || pending_ == 0; });
    int n = 0;
    while (n < max && !done_.empty()) {
      out[n++] = done_.front();
      done_.pop_front();
    }
    return n;
  }

 private:
  void worker() {
    for (;;) {
      ReadOp* op;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (stop_ && queue_.empty()) return;
        op = queue_.front();
        queue_.pop_front();
      }
      for (;;) {
        const int64_t r = read_(fds_[op->file], op->dst + op->done, op->len - op->done, op->offset + op->done);
        if (settle(op, r, opt_.max_attempts)) break;
      }
      {
        std::lock_guard<std::mutex> g(mu_);
        done_.push_back(op);
        --pending_;
      }
      done_cv_.notify_all();
    }
  }
  std::vector<int> fds_;
  IoOptions opt_;
  bool direct_;
  ReadFn read_;
  mutable std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<ReadOp*> queue_, done_;
  int pending_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<IoBackend> make_pread_backend(const std::vector<std::string>& files, const IoOptions& opt, bool direct) {
  std::string err;
  auto fds = open_files(files, direct, &err);
  if (fds.empty() && !files.empty()) fail("{}", err);
  return std::make_unique<PreadBackend>(std::move(fds), opt, direct);
}

std::unique_ptr<IoBackend> make_io_backend(const std::vector<std::string>& files, const IoOptions& opt, std::string* why) {
  // A depth below 1 never submits a read: the cache would wait forever.
  STRATA_CHECK(opt.queue_depth >= 1 && opt.queue_depth <= 4096, "expert I/O queue depth {} is out of range (1..4096; --io-depth)", opt.queue_depth);
  std::string reason = "pread forced by option";
  if (!opt.force_pread) {
    auto fds = open_files(files, /*direct=*/true, &reason);
    if (!fds.empty() || files.empty()) {
      if (auto b = UringBackend::create(std::move(fds), opt, &reason)) {
        if (why) why->clear();
        return b;
      }
    }
  }
  // O_DIRECT alone (without io_uring) still avoids the page-cache double copy.
  std::string err2;
  auto fds = open_files(files, /*direct=*/true, &err2);
  const bool direct = !fds.empty() || files.empty();
  for (int fd : fds) ::close(fd);
  if (why) *why = reason + (direct ? "" : "; O_DIRECT unavailable (" + err2 + "): buffered reads");
  return make_pread_backend(files, opt, direct);
}

std::unique_ptr<IoBackend> make_faulty_backend(const std::vector<std::string>& files, const IoOptions& opt, const FaultPlan& plan) {
  std::string err;
  auto fds = open_files(files, /*direct=*/false, &err);
  if (fds.empty() && !files.empty()) fail("{}", err);
  auto counter = std::make_shared<std::atomic<int>>(0);
  ReadFn fn = [plan, counter](int fd, uint8_t* dst, uint64_t len, uint64_t off) -> int64_t {
    const int idx = ++*counter;
    if (idx <= plan.fail_first) return -EIO;
    if (plan.eio_every > 0 && idx % plan.eio_every == 0) return -EIO;
    if (plan.short_every > 0 && idx % plan.short_every == 0 && len > 1) len = len / 2;
    return sys_pread(fd, dst, len, off);
  };
  return std::make_unique<PreadBackend>(std::move(fds), opt, false, std::move(fn));
}

}  // namespace strata
