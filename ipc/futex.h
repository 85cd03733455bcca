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
};

}  // namespace kvasir::ipc
