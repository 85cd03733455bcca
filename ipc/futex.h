// ipc/futex.h — sleeping on a 32-bit word in shared memory (Linux futex).
//
// Why not boost::interprocess_condition: a process-shared pthread mutex held
// by a stage that dies (SIGKILL, OOM) stays locked forever and wedges the
// ring. A futex holds no lock: a waiter sleeps until the word changes, and a
// dead peer leaves nothing behind. Waits take a timeout so that every loop
// re-checks its shutdown flag; an idle process wakes a few times a second
// and otherwise uses no CPU.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <ctime>

namespace kvasir::ipc {

static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free);

// Sleeps while *word == expected, at most timeout_ns. Spurious returns are
// fine: callers loop and re-check their condition.
inline void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns) {
  timespec ts{time_t(timeout_ns / 1000000000), long(timeout_ns % 1000000000)};
  // Not FUTEX_PRIVATE: the word lives in memory shared between processes.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

inline void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

inline int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// One step of a spin-wait: tells the core this thread is polling (on x86
// `pause`: the sibling hyperthread gets the pipeline, and leaving the loop
// costs no memory-order flush).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// How a blocking wait waits (SpscRing::push/pop, the bridge's loop).
//
// spin_ns > 0: before sleeping, poll the bell for up to spin_ns, once per
// wait. A process that sleeps in the futex gives its core to anything
// runnable and, on a busy host, gets it back a scheduler tick or more after
// the wake: with several micro-batches in flight the stages hand batches to
// each other every few milliseconds, and those late wake-ups ate the whole
// in-flight gain beside two `nice -n 19` busy loops (docs/ring.md, "Waits").
// A hand-off that comes within the spin is taken on a core never given up
// (and the producer skips the wake syscall: nobody sleeps). 0 = sleep after
// the short counted spin only, as before spin_ns existed.
// poll_ns: the longest sleep before the caller re-checks its stop flag.
struct WaitPolicy {
  int64_t spin_ns = 0;
  int64_t poll_ns = 100'000'000;
};

// A doorbell: a counter that waiters sleep on. ring() after publishing
// state; a waiter reads seen = value() *before* checking its condition, then
// wait(seen) — a ring in between changes the value, so no wake-up is lost.
struct Bell {
  std::atomic<uint32_t> value{0};
  std::atomic<uint32_t> sleepers{0};

  uint32_t seen() const { return value.load(std::memory_order_seq_cst); }
  void ring() {
    value.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(&value);
  }
  void wait(uint32_t seen, int64_t timeout_ns) {
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (value.load(std::memory_order_seq_cst) == seen) futex_wait(&value, seen, timeout_ns);
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
  // Polls for at most spin_ns (on the monotonic clock, read every 64
  // polls) while the bell still reads `seen`, without sleeping: true when it
  // was rung meanwhile, false when the bound passed (or spin_ns <= 0).
  bool spin(uint32_t seen, int64_t spin_ns) const {
    if (spin_ns <= 0) return value.load(std::memory_order_seq_cst) != seen;
    const int64_t until = now_ns() + spin_ns;
    for (;;) {
      for (int i = 0; i < 64; ++i) {
        if (value.load(std::memory_order_acquire) != seen) return true;
        cpu_relax();
      }
      if (now_ns() >= until) return value.load(std::memory_order_seq_cst) != seen;
    }
  }
  // spin(seen, w.spin_ns), then wait(seen, w.poll_ns) if nothing rang.
  void await(uint32_t seen, const WaitPolicy& w) {
    if (w.spin_ns > 0 && spin(seen, w.spin_ns)) return;
    wait(seen, w.poll_ns);
  }
};

}  // namespace kvasir::ipc
