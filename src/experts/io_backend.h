#pragma once
// Asynchronous reads of expert bytes. The default backend is io_uring on O_DIRECT file
// descriptors at a deep queue (the page cache never holds a second copy of a cached expert);
// where io_uring or O_DIRECT is unavailable (tmpfs, old kernels, seccomp) a pread thread pool
// takes over, and the choice is reported, never silently assumed.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace strata {

struct ReadOp {
  // Set by the caller:
  uint32_t file = 0;
  uint64_t offset = 0;      // aligned for O_DIRECT backends
  uint32_t len = 0;         // aligned for O_DIRECT backends
  uint8_t* dst = nullptr;   // aligned for O_DIRECT backends
  uint32_t min_len = 0;     // bytes that must be read (the rest may lie past the end of file)
  void* user = nullptr;
  // Set by the backend on completion: bytes read (>= min_len) or -errno.
  int64_t result = 0;
  // Progress for retries of short reads (zero them before submitting).
  uint32_t done = 0;
  int attempts = 0;  // consecutive failed syscalls
  int calls = 0;     // syscalls so far
};

struct IoOptions {
  int queue_depth = 64;        // requests in flight
  int pread_threads = 8;       // fallback pool size
  bool force_pread = false;    // skip io_uring / O_DIRECT (tests, benchmarking)
  int max_attempts = 4;        // retries of EIO / EAGAIN / short reads before failing a request
};

class IoBackend {
 public:
  virtual ~IoBackend() = default;
  virtual std::string describe() const = 0;
  virtual bool direct() const = 0;  // true when reads bypass the page cache
  // Queues a read; never blocks for I/O (may block briefly when the queue is full).
  virtual void submit(ReadOp* op) = 0;
  // Returns completed ops (up to max); with wait, blocks until at least one completes
  // (returns 0 only when nothing is in flight).
  virtual int reap(ReadOp** out, int max, bool wait) = 0;
  // Ops submitted and not yet returned by reap (finished reads waiting to be reaped included).
  virtual int in_flight() const = 0;
  // Several drives (make_multi_drive_backend): bytes each has read so far; empty otherwise.
  virtual std::vector<uint64_t> drive_bytes() const { return {}; }
};

// io_uring + O_DIRECT when possible, else a pread pool; `why` receives the reason for a fallback.
std::unique_ptr<IoBackend> make_io_backend(const std::vector<std::string>& files, const IoOptions& opt, std::string* why = nullptr);
std::unique_ptr<IoBackend> make_pread_backend(const std::vector<std::string>& files, const IoOptions& opt, bool direct);

// Several drives holding byte-identical copies of the files (--model-copy), one backend each (a
// ReadOp's file index means the same part on every drive): each read goes to the drive with the
// fewest bytes in flight; a read that fails on one drive takes that drive out of rotation (a
// warning on stderr) and is read again from another; names: for messages.
std::unique_ptr<IoBackend> make_multi_drive_backend(std::vector<std::unique_ptr<IoBackend>> drives, std::vector<std::string> names);

// Test backend: a pread pool whose reads fail on purpose. Syscall k (counted over all reads,
// retries included) returns -EIO when k % eio_every == 0 and reads only half the requested
// bytes when k % short_every == 0. Retries must absorb occasional faults; persistent ones fail
// the request with a clear error.
struct FaultPlan {
  int eio_every = 0;
  int short_every = 0;
  int fail_first = 0;  // the first N syscalls fail with -EIO (then the device "recovers")
  bool active() const { return eio_every > 0 || short_every > 0 || fail_first > 0; }
};
std::unique_ptr<IoBackend> make_faulty_backend(const std::vector<std::string>& files, const IoOptions& opt, const FaultPlan& plan);

}  // namespace strata
