// The bounded spin before a sleep (ipc/futex.h Bell::spin, WaitPolicy; the
// rings' blocking forms): it gives up at its bound when nothing comes, and
// returns as soon as another thread or process rings.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <new>
#include <thread>

#include "ipc/ring.h"

namespace kvasir::ipc {
namespace {

struct Msg {
  int64_t sent_ns;
  int32_t n;
};

// A bell and a ring in memory shared with a forked child.
struct Shared {
  Bell bell;
  SpscRing<Msg> ring;
};

Shared* map_shared() {
  void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(p, MAP_FAILED);
  auto* s = new (p) Shared();
  s->ring.init(2);
  return s;
}

double cpu_ms(const rusage& ru) {
  return ru.ru_utime.tv_sec * 1e3 + ru.ru_utime.tv_usec / 1e3 + ru.ru_stime.tv_sec * 1e3 +
         ru.ru_stime.tv_usec / 1e3;
}

TEST(Bell, SpinGivesUpAtItsBoundWhenNothingRings) {
  Bell b;
  const uint32_t seen = b.seen();
  for (int64_t bound : {int64_t(50'000), int64_t(500'000), int64_t(5'000'000)}) {
    const int64_t t0 = now_ns();
    EXPECT_FALSE(b.spin(seen, bound));
    const int64_t took = now_ns() - t0;
    EXPECT_GE(took, bound);
    // Preemption on a loaded machine may add a scheduler slice or two.
    EXPECT_LT(took, bound + 50'000'000) << bound;
  }
  EXPECT_FALSE(b.spin(seen, 0));  // no spin at all
  b.ring();
  EXPECT_TRUE(b.spin(seen, 0));   // ... but a bell already rung reads as rung
  EXPECT_TRUE(b.spin(seen, 1'000'000'000));
}

TEST(Bell, SpinReturnsWhenAnotherThreadRings) {
  Bell b;
  const uint32_t seen = b.seen();
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    b.ring();
  });
  const int64_t t0 = now_ns();
  EXPECT_TRUE(b.spin(seen, 5'000'000'000));
  EXPECT_LT(now_ns() - t0, 1'000'000'000);  // the ring, not the 5 s bound
  t.join();
  EXPECT_EQ(b.sleepers.load(), 0u);  // a spinner is no sleeper: ring() made no syscall for it
}

// A consumer process spinning 2 s per wait; the producer pushes three
// messages 20 ms apart: each arrives within a few ms, and the consumer
// never needed its sleep.
TEST(WaitPolicy, PopSpinsAcrossProcessesAndTakesEachMessagePromptly) {
  Shared* s = map_shared();
  pid_t c = fork();
  if (c == 0) {
    int late = 0;
    for (int i = 0; i < 3; ++i) {
      Msg m{};
      if (!s->ring.pop(m, [] { return false; }, WaitPolicy{2'000'000'000, 100'000'000})) _exit(2);
      if (m.n != i) _exit(3);
      if (now_ns() - m.sent_ns > 200'000'000) ++late;
    }
    _exit(late > 1 ? 4 : 0);  // one late wake-up allowed on a loaded machine
  }
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(s->ring.try_push(Msg{now_ns(), i}));
  }
  int st = 0;
  waitpid(c, &st, 0);
  EXPECT_TRUE(WIFEXITED(st)) << st;
  EXPECT_EQ(WEXITSTATUS(st), 0);
  munmap(s, sizeof(Shared));
}

// Nothing comes: the spin is bounded, the wait then sleeps (little CPU),
// and the stop flag still ends it.
TEST(WaitPolicy, AnIdlePopSpinsOnceThenSleeps) {
  Shared* s = map_shared();
  auto* stop = static_cast<std::atomic<uint32_t>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  stop->store(0);
  pid_t c = fork();
  if (c == 0) {
    Msg m{};
    const bool got = s->ring.pop(m, [&] { return stop->load() != 0; },
                                 WaitPolicy{20'000'000, 50'000'000});
    _exit(got ? 1 : 0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  stop->store(1);
  rusage ru{};
  int st = 0;
  wait4(c, &st, 0, &ru);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  // One 20 ms spin, then sleeps of 50 ms: far below the 700 ms a spin
  // on every wake-up would burn.
  EXPECT_LT(cpu_ms(ru), 150) << "an idle consumer must sleep after its one spin";
  munmap(stop, 4096);
  munmap(s, sizeof(Shared));
}

TEST(WaitPolicy, PushSpinsForRoomFreedByAnotherThread) {
  SpscRing<Msg> r;
  r.init(1);
  ASSERT_TRUE(r.try_push(Msg{0, 0}));
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    Msg m{};
    EXPECT_TRUE(r.try_pop(m));
  });
  const int64_t t0 = now_ns();
  EXPECT_TRUE(r.push(Msg{0, 1}, [] { return false; }, WaitPolicy{5'000'000'000, 100'000'000}));
  EXPECT_LT(now_ns() - t0, 1'000'000'000);
  t.join();
  EXPECT_EQ(r.not_full.sleepers.load(), 0u);
}

}  // namespace
}  // namespace kvasir::ipc
