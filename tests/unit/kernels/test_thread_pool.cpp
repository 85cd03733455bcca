#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/check.h"
#include "kernels/cpu/thread_pool.h"

namespace kvasir::cpu {
namespace {

TEST(ThreadPool, CoversEveryIndexOnceForManySizes) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 5, 7, 64, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> bad_thread{0};
      pool.parallel_for(n, [&](int64_t b, int64_t e, int t) {
        if (t < 0 || t >= threads || b >= e) bad_thread++;
        for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[size_t(i)].load(), 1) << threads << " " << n;
      EXPECT_EQ(bad_thread.load(), 0);
    }
  }
}

TEST(ThreadPool, SingleThreadRunsInlineOnCaller) {
  ThreadPool pool(1);
  const auto me = std::this_thread::get_id();
  int calls = 0;
  pool.parallel_for(100, [&](int64_t b, int64_t e, int t) {
    EXPECT_EQ(std::this_thread::get_id(), me);
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 100);
    EXPECT_EQ(t, 0);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
}

// Chunks go to whichever thread claims them: the caller (index 0) and the
// workers (their own indices) all take part when the work waits for them.
// Here each chunk holds until all three have started; a thread runs its
// chunks one after another, so the three run on three threads at once, and
// with two workers one of them is the caller. (Which thread claims which
// chunk is not fixed: a woken worker may claim the first.)
TEST(ThreadPool, UsesSeveralThreadsAndTheCaller) {
  ThreadPool pool(3);
  const auto me = std::this_thread::get_id();
  std::atomic<int> started{0};
  std::vector<std::thread::id> ids(3);
  pool.parallel_for(3, [&](int64_t b, int64_t e, int t) {
    EXPECT_EQ(e, b + 1);  // 3 items, 3 chunks
    ids[size_t(b)] = std::this_thread::get_id();
    EXPECT_EQ(t == 0, std::this_thread::get_id() == me) << "index 0 is the caller";
    started++;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (started.load() < 3 && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
  });
  EXPECT_EQ(started.load(), 3);
  EXPECT_NE(ids[0], ids[1]);
  EXPECT_NE(ids[0], ids[2]);
  EXPECT_NE(ids[1], ids[2]);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), me), 1) << "the caller ran one chunk";
}

// A thread runs the chunks it claims one after another, never two at once,
// so a per-thread scratch indexed by the thread index is safe.
TEST(ThreadPool, AThreadsChunksNeverOverlap) {
  ThreadPool pool(4, /*spin_us=*/20);
  std::vector<std::atomic<int>> busy(4);
  std::atomic<int> overlaps{0}, chunks{0};
  for (int it = 0; it < 200; ++it)
    pool.parallel_for(64, [&](int64_t, int64_t, int t) {
      if (busy[size_t(t)].fetch_add(1) != 0) overlaps++;
      chunks++;
      busy[size_t(t)].fetch_sub(1);
    });
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(chunks.load(), 200 * 4 * ThreadPool::kChunksPerThread);
}

TEST(ThreadPool, ManySmallCallsSumCorrectly) {
  ThreadPool pool(3, /*spin_us=*/20);
  std::atomic<int64_t> sum{0};
  for (int it = 0; it < 3000; ++it)
    pool.parallel_for(10, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
  EXPECT_EQ(sum.load(), 3000 * 45);
}

TEST(ThreadPool, SleepingWorkersWakeUp) {
  ThreadPool pool(2, /*spin_us=*/0);  // always sleep between jobs
  for (int it = 0; it < 200; ++it) {
    std::atomic<int> n{0};
    pool.parallel_for(2, [&](int64_t b, int64_t e, int) { n += int(e - b); });
    ASSERT_EQ(n.load(), 2);
  }
}

TEST(ThreadPool, ExceptionOnWorkerIsRethrownAndPoolStaysUsable) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int victim = 0; victim < threads; ++victim) {
      std::atomic<int> done{0};
      EXPECT_THROW(pool.parallel_for(threads,
                                     [&](int64_t b, int64_t, int) {
                                       if (b == victim) KV_FAIL("boom {}", b);
                                       done++;
                                     }),
                   kvasir::Error);
      EXPECT_EQ(done.load(), threads - 1);  // the other chunks still ran
      std::atomic<int> after{0};
      pool.parallel_for(50, [&](int64_t b, int64_t e, int) { after += int(e - b); });
      EXPECT_EQ(after.load(), 50);
    }
  }
}

TEST(ThreadPool, ExceptionsOnAllThreadsRethrowOne) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(3, [](int64_t, int64_t, int) { throw std::runtime_error("x"); }),
               std::runtime_error);
}

TEST(ThreadPool, NestedCallRunsInline) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.parallel_for(2, [&](int64_t, int64_t, int) {
    pool.parallel_for(10, [&](int64_t b, int64_t e, int) { inner += int(e - b); });
  });
  EXPECT_EQ(inner.load(), 20);
}

TEST(ThreadPool, AcceptsStdFunction) {
  ThreadPool pool(2);
  std::atomic<int> n{0};
  const std::function<void(int64_t, int64_t, int)> fn = [&](int64_t b, int64_t e, int) {
    n += int(e - b);
  };
  pool.parallel_for(9, fn);
  EXPECT_EQ(n.load(), 9);
}

// The width rule is asked at every call, its answer clamped to [1, size()]:
// each call covers [0, n) once with thread indices below that width, and
// the threads left out do no work.
TEST(ThreadPool, WidthIsDecidedPerCall) {
  ThreadPool pool(4, /*spin_us=*/20);
  std::atomic<int> want{4};
  pool.set_width(
      {[](const void* c) { return static_cast<const std::atomic<int>*>(c)->load(); }, &want});
  for (int it = 0; it < 400; ++it) {
    const int w = (it * 7) % 6 - 1;  // -1..4: out of range clamps
    want.store(w);
    const int expect = std::clamp(w, 1, 4);
    EXPECT_EQ(pool.width(), expect);
    const int64_t n = 1 + it % 37;
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::atomic<int> max_t{0};
    std::atomic<int> calls{0};
    pool.parallel_for(n, [&](int64_t b, int64_t e, int t) {
      int m = max_t.load();
      while (t > m && !max_t.compare_exchange_weak(m, t)) {
      }
      calls++;
      for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << it;
    ASSERT_LT(max_t.load(), expect) << it;
    // n split into kChunksPerThread chunks per taker (at most n; one call
    // when it runs inline).
    const int64_t chunks =
        expect == 1 || n == 1 ? 1 : std::min<int64_t>(n, expect * ThreadPool::kChunksPerThread);
    ASSERT_EQ(calls.load(), chunks) << it;
  }
}

// A width of one runs on the caller alone, like a pool of one.
TEST(ThreadPool, WidthOneRunsInline) {
  ThreadPool pool(3);
  pool.set_width({[](const void*) { return 1; }, nullptr});
  const auto me = std::this_thread::get_id();
  int calls = 0;
  pool.parallel_for(50, [&](int64_t b, int64_t e, int t) {
    EXPECT_EQ(std::this_thread::get_id(), me);
    EXPECT_EQ(e - b, 50);
    EXPECT_EQ(t, 0);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
}

TEST(ThreadPool, RejectsBadSize) {
  EXPECT_THROW(ThreadPool(0), kvasir::Error);
}

}  // namespace
}  // namespace kvasir::cpu
