// tests/unit/ipc/test_hang_watch.cpp — the watchdog's decision
// (ipc/hang_watch.h) on synthetic looks: a stopped stage is hung after the
// floor or k × p99, a slow one whose CPU time advances is spared until the
// busy cap, an idle or waiting one is never killed; and the CPU-time signal
// on a real process.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <thread>

#include "ipc/hang_watch.h"

using namespace kvasir::ipc;

namespace {

constexpr int64_t kSec = 1'000'000'000;
constexpr int64_t kT0 = 100 * kSec;  // a monotonic clock's "now" (never 0)

HangSample holding(uint32_t passed) {
  HangSample s;
  s.watched = true, s.pending = true, s.passed = passed;
  return s;
}

// One look at time t (seconds after kT0) with the process's CPU ticks.
std::optional<Hang> look(HangWatch& w, const HangLimits& l, const HangSample& s, double t,
                         int64_t ticks) {
  return w.look(l, s, kT0 + int64_t(t * kSec), [&] { return ticks; });
}

}  // namespace

TEST(HangWatch, StoppedStageIsHungAfterTheFloor) {
  const HangLimits l{10, 1, 600};
  HangWatch w;
  const HangSample s = holding(7);
  EXPECT_FALSE(look(w, l, s, 0, 50)) << "the first look is progress";
  EXPECT_FALSE(look(w, l, s, 0.5, 50));  // the CPU time, first seen now
  EXPECT_FALSE(look(w, l, s, 1.4, 50)) << "0.9 s without CPU progress: under the floor";
  const auto h = look(w, l, s, 1.6, 50);
  ASSERT_TRUE(h) << "1.1 s held without CPU progress, floor 1 s, no history";
  EXPECT_DOUBLE_EQ(h->held_s, 1.6);
  EXPECT_NEAR(h->idle_s, 1.1, 1e-9);
  EXPECT_EQ(h->limit_s, 1);
  const std::string text = h->text("stage 1", l);
  EXPECT_EQ(text.rfind("stage 1 held a batch for 1.60 s, 1.10 s without CPU progress", 0), 0)
      << text;
  EXPECT_NE(text.find("hung, killed"), std::string::npos) << text;
}

TEST(HangWatch, LimitIsKTimesP99OfTheBatchTimes) {
  const HangLimits l{10, 1, 600};
  HangWatch w(64);
  HangSample s = holding(0);
  // 40 batches of 0.2 s, moving work on at every look: p99 0.2 s, limit 2 s.
  for (int i = 0; i < 40; ++i) {
    s.passed = uint32_t(i), s.batches = uint64_t(i), s.last_busy_ns = uint64_t(kSec / 5);
    EXPECT_FALSE(look(w, l, s, 0.2 * i, 1000 + i)) << "progress at every look";
  }
  EXPECT_DOUBLE_EQ(w.p99_s(), 0.2);
  const double t = 0.2 * 39;  // stopped from here on
  EXPECT_FALSE(look(w, l, s, t + 0.1, 5000));
  EXPECT_FALSE(look(w, l, s, t + 1.5, 5000)) << "past the floor, under k x p99 = 2 s";
  const auto h = look(w, l, s, t + 2.2, 5000);
  ASSERT_TRUE(h);
  EXPECT_NEAR(h->limit_s, 2, 1e-9);
  EXPECT_NEAR(h->p99_s, 0.2, 1e-9);
}

TEST(HangWatch, ComputingStageIsSparedUntilTheBusyCap) {
  const HangLimits l{10, 1, 30};
  HangWatch w;
  const HangSample s = holding(3);
  int64_t ticks = 0;
  for (double t = 0; t <= 30; t += 0.5)
    ASSERT_FALSE(look(w, l, s, t, ticks += 7)) << "its CPU time advances: slow, not hung, t " << t;
  const auto h = look(w, l, s, 30.5, ticks += 7);
  ASSERT_TRUE(h) << "held past the busy cap, computing or not";
  EXPECT_DOUBLE_EQ(h->held_s, 30.5);
  EXPECT_LT(h->idle_s, 1);

  const HangLimits forever{10, 1, 0};  // busy cap 0: spared forever
  HangWatch w2;
  for (double t = 0; t <= 3600; t += 10) ASSERT_FALSE(look(w2, forever, s, t, ticks += 7)) << t;
}

TEST(HangWatch, IdleWaitingOrUnwatchedStageIsNeverKilled) {
  const HangLimits l{10, 1, 5};
  HangSample idle = holding(9);
  idle.pending = false;
  HangSample waiting = holding(9);
  waiting.waiting = true;  // blocked on a full ring downstream: the downstream's hang
  HangSample restarting = holding(9);
  restarting.watched = false;
  HangSample moving = holding(0);  // moves work on at every look
  int calls = 0;
  const HangSample cases[] = {idle, waiting, restarting, moving};
  for (int c = 0; c < 4; ++c) {
    HangWatch w;
    HangSample s = cases[c];
    for (double t = 0; t <= 100; t += 0.5) {
      if (c == 3) s.passed++;
      ASSERT_FALSE(w.look(l, s, kT0 + int64_t(t * kSec), [&] { return ++calls, int64_t(1); }))
          << "case " << c << ", t " << t;
    }
  }
  EXPECT_EQ(calls, 0) << "CPU time is read only while a process holds a batch";

  HangWatch off;  // floor 0: no watchdog
  for (double t = 0; t <= 100; t += 0.5) ASSERT_FALSE(look(off, {10, 0, 5}, holding(1), t, 1));
}

TEST(HangWatch, ResetStartsTheWatchAfresh) {
  const HangLimits l{10, 1, 600};
  HangWatch w;
  const HangSample s = holding(2);
  EXPECT_FALSE(look(w, l, s, 0, 5));
  EXPECT_FALSE(look(w, l, s, 0.1, 5));
  w.reset(kT0 + int64_t(1.0 * kSec));  // a restarted process
  EXPECT_FALSE(look(w, l, s, 1.1, 5)) << "the CPU time is sampled again";
  EXPECT_FALSE(look(w, l, s, 2.0, 5));
  EXPECT_TRUE(look(w, l, s, 2.2, 5));
}

// The watchdog spares a slow stage whose CPU time advances (a loaded
// machine) and kills one whose CPU time stands still (SIGSTOP): the signal
// it reads must tell the two apart.
TEST(HangWatch, CpuTicksAdvanceWhenComputingAndStandStillWhenStopped) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    volatile uint64_t x = 0;
    for (;;) x = x + 1;  // spin until killed
  }
  auto ticks_over = [&](int ms) {
    const int64_t a = process_cpu_ticks(pid);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    const int64_t b = process_cpu_ticks(pid);
    EXPECT_GE(a, 0);
    return b - a;
  };
  EXPECT_GT(ticks_over(500), 0) << "a spinning process's CPU time must advance";
  kill(pid, SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(ticks_over(500), 0) << "a stopped process's CPU time must stand still";
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  EXPECT_EQ(process_cpu_ticks(pid), -1) << "a reaped pid is unreadable";
}
