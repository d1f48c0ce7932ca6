// ThreadPool: run() calls the job once on every thread (the caller is thread 0) and returns
// after all of them; parallel_for covers every index exactly once in grain-aligned contiguous
// ranges; writes made in a job are visible to the caller afterwards; several pools work side by
// side and one pool's job may use another pool. Not supported (by design, not tested): calling
// run() on a pool from inside its own job, calling one pool from two threads at once, and a job
// that throws (a worker's exception terminates the process).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

using namespace strata;

TEST(ThreadPool, RejectsBadSizes) {
  EXPECT_THROW(ThreadPool(0), Error);
  EXPECT_THROW(ThreadPool(-3), Error);
  EXPECT_THROW(ThreadPool(1025), Error);
  EXPECT_EQ(ThreadPool(1).size(), 1);
  EXPECT_EQ(ThreadPool(5).size(), 5);
  EXPECT_GE(default_thread_count(), 1);
}

TEST(ThreadPool, RunCallsEveryThreadOnceCallerIsThreadZero) {
  for (int nt : {1, 2, 3, 8}) {
    ThreadPool pool(nt);
    for (int rep = 0; rep < 500; ++rep) {
      std::vector<int> calls(static_cast<size_t>(nt), 0);  // plain ints: each written by one thread
      std::vector<std::thread::id> who(static_cast<size_t>(nt));
      pool.run([&](int tid) {
        calls[static_cast<size_t>(tid)]++;
        who[static_cast<size_t>(tid)] = std::this_thread::get_id();
      });
      for (int t = 0; t < nt; ++t) ASSERT_EQ(calls[static_cast<size_t>(t)], 1) << nt << " threads, rep " << rep << ", thread " << t;
      ASSERT_EQ(who[0], std::this_thread::get_id());
      ASSERT_EQ(std::set<std::thread::id>(who.begin(), who.end()).size(), static_cast<size_t>(nt)) << "threads must be distinct";
    }
  }
}

TEST(ThreadPool, ParallelForCoversEveryIndexOnceInAlignedRanges) {
  for (int nt : {1, 2, 3, 7}) {
    ThreadPool pool(nt);
    for (int64_t n : {0, 1, 2, 7, 64, 1000, 1001}) {
      for (int64_t grain : {1, 3, 16, 64, 5000}) {
        std::vector<int> hits(static_cast<size_t>(n), 0);
        std::vector<int64_t> begin_of(static_cast<size_t>(nt), -1), end_of(static_cast<size_t>(nt), -1);
        std::vector<int> calls(static_cast<size_t>(nt), 0);
        pool.parallel_for(n, grain, [&](int64_t b, int64_t e, int tid) {
          ASSERT_GE(tid, 0);
          ASSERT_LT(tid, nt);
          calls[static_cast<size_t>(tid)]++;
          begin_of[static_cast<size_t>(tid)] = b;
          end_of[static_cast<size_t>(tid)] = e;
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        });
        const std::string where = std::to_string(nt) + " threads, n " + std::to_string(n) + ", grain " + std::to_string(grain);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << where << ", index " << i;
        for (int t = 0; t < nt; ++t) {
          ASSERT_LE(calls[static_cast<size_t>(t)], 1) << where << ": one range per thread";
          if (!calls[static_cast<size_t>(t)]) continue;
          const int64_t b = begin_of[static_cast<size_t>(t)], e = end_of[static_cast<size_t>(t)];
          EXPECT_LT(b, e) << where << ": no empty ranges";
          EXPECT_EQ(b % grain, 0) << where;
          if (e != n) {
            EXPECT_EQ((e - b) % grain, 0) << where << ": only the last range may be partial";
          }
        }
      }
    }
  }
}

TEST(ThreadPool, ParallelForSpreadsWork) {
  // Enough chunks for every thread: each of the 4 threads gets a range.
  ThreadPool pool(4);
  std::vector<int> used(4, 0);
  pool.parallel_for(400, 10, [&](int64_t, int64_t, int tid) { used[static_cast<size_t>(tid)] = 1; });
  EXPECT_EQ(used, std::vector<int>(4, 1));
}

TEST(ThreadPool, SeveralPoolsFromSeveralThreads) {
  // Four caller threads, each with its own pool, many calls each, all at once.
  constexpr int kCallers = 4, kReps = 300;
  std::vector<int64_t> sums(kCallers, 0);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c)
    callers.emplace_back([&sums, c] {
      ThreadPool pool(3);
      std::vector<int64_t> part(3);
      for (int rep = 0; rep < kReps; ++rep) {
        std::fill(part.begin(), part.end(), 0);
        pool.parallel_for(999, 1, [&](int64_t b, int64_t e, int tid) {
          for (int64_t i = b; i < e; ++i) part[static_cast<size_t>(tid)] += i;
        });
        for (int64_t v : part) sums[static_cast<size_t>(c)] += v;
      }
    });
  for (auto& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) EXPECT_EQ(sums[static_cast<size_t>(c)], int64_t{kReps} * 999 * 998 / 2) << "caller " << c;
}

TEST(ThreadPool, JobMayUseAnotherPool) {
  // Each thread of the outer pool drives its own inner pool.
  constexpr int kOuter = 3, kInner = 2, kN = 500;
  ThreadPool outer(kOuter);
  std::vector<std::unique_ptr<ThreadPool>> inner;
  for (int t = 0; t < kOuter; ++t) inner.push_back(std::make_unique<ThreadPool>(kInner));
  std::vector<std::vector<int>> hits(kOuter, std::vector<int>(kN, 0));
  for (int rep = 0; rep < 50; ++rep) {
    outer.run([&](int tid) {
      inner[static_cast<size_t>(tid)]->parallel_for(kN, 7, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(tid)][static_cast<size_t>(i)]++;
      });
    });
  }
  for (int t = 0; t < kOuter; ++t)
    for (int i = 0; i < kN; ++i) ASSERT_EQ(hits[static_cast<size_t>(t)][static_cast<size_t>(i)], 50) << "outer " << t << ", index " << i;
}

TEST(ThreadPool, CreateUseDestroyRepeatedly) {
  // A dispatch right after construction (before the workers first wait) and destruction right
  // after a dispatch must neither lose a job nor hang.
  for (int rep = 0; rep < 200; ++rep) {
    ThreadPool pool(1 + rep % 4);
    std::atomic<int> calls{0};
    pool.run([&](int) { calls.fetch_add(1, std::memory_order_relaxed); });
    ASSERT_EQ(calls.load(), pool.size()) << "rep " << rep;
  }
  for (int rep = 0; rep < 50; ++rep) ThreadPool idle(3);  // never used
}

// Issue 33: a throw on a worker reaches the caller of run() (it terminated the process), after
// every thread is done; the pool stays usable.
TEST(ThreadPool, AnExceptionOnAnyThreadReachesTheCaller) {
  ThreadPool pool(4);
  for (int thrower : {0, 1, 3}) {
    std::atomic<int> ran{0};
    try {
      pool.run([&](int tid) {
        ran.fetch_add(1);
        if (tid == thrower) throw std::runtime_error("thread " + std::to_string(tid));
      });
      ADD_FAILURE() << "no exception from thread " << thrower;
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "thread " + std::to_string(thrower));
    }
    EXPECT_EQ(ran.load(), 4);
  }
  std::atomic<int> after{0};
  pool.run([&](int) { after.fetch_add(1); });
  EXPECT_EQ(after.load(), 4);
}
