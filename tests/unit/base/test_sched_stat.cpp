// A process's scheduler statistics (base/sched_stat.h), read for real:
// more busy threads than CPUs must wait on a run queue, and be preempted.
#include "base/sched_stat.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "base/cpu_list.h"

namespace kvasir {
namespace {

TEST(SchedStat, ReadsThisProcess) {
  // A running thread's CPU time is brought up to date at a tick or a
  // switch: run past a few ticks first.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  while (std::chrono::steady_clock::now() < until) {
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const SchedStat s = read_sched_stat(getpid());
  if (!s.ok) GTEST_SKIP() << "no /proc/PID/task/*/schedstat on this kernel";
  EXPECT_GE(s.threads, 1);
  EXPECT_GT(s.run_ns, 0);
  EXPECT_GE(s.wait_ns, 0);
}

TEST(SchedStat, NoSuchProcessIsNotOk) {
  EXPECT_FALSE(read_sched_stat(0).ok);
  EXPECT_FALSE(read_sched_stat(-5).ok);
  EXPECT_FALSE(read_sched_stat(1 << 30).ok);  // beyond pid_max
}

TEST(SchedStat, MoreBusyThreadsThanCpusWaitAndArePreempted) {
  const SchedStat before = read_sched_stat(getpid());
  if (!before.ok) GTEST_SKIP() << "no schedstat";
  const size_t n = allowed_cpus().size() + 2;
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (size_t i = 0; i < n; ++i)
    busy.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const SchedStat during = read_sched_stat(getpid());  // the busy threads are counted
  stop = true;
  for (auto& t : busy) t.join();
  EXPECT_GE(during.threads, int(n) + 1);
  // n threads on n - 2 CPUs for 400 ms: at least ~800 thread-ms runnable
  // but not running, across them; half of it is enough to tell.
  EXPECT_GT(during.wait_ns - before.wait_ns, 200'000'000) << during.wait_ns;
  EXPECT_GT(during.nonvoluntary, before.nonvoluntary);
  // They ran too (how much depends on what else the machine runs).
  EXPECT_GT(during.run_ns - before.run_ns, 50'000'000);
}

}  // namespace
}  // namespace kvasir
