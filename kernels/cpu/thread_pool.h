// kernels/cpu/thread_pool.h — a persistent pool of worker threads for one stage.
//
// Workers spin briefly after a job (so back-to-back kernels of one forward
// pass do not pay a wake-up), then sleep on a condition variable (an idle
// stage uses no CPU). parallel_for splits [0, n) into contiguous chunks,
// kChunksPerThread per taking thread (at most n), which the threads claim
// in turn until none is left; the calling thread is thread 0 and takes
// part, so ThreadPool(1) runs everything inline. The call returns once
// every chunk is done, not once every thread has looked: on a busy host a
// worker the kernel scheduler has not run yet costs the call at most the
// chunk it claimed, not its whole share (with one chunk per thread, two
// threads on two loaded cores decoded 2.7x slower than one thread). A
// call allocates nothing: the callable is passed by address, never copied
// into a std::function.
//
// An exception thrown by fn on any thread is captured (the first one wins),
// every other chunk still finishes, and it is rethrown on the caller.
// parallel_for called from inside a task runs inline (no deadlock); calls
// from several outside threads are serialised.
//
// The width of a call — how many of the threads take part — may be decided
// per call by a PoolWidth (set_width): the CPU stages of one instance share
// the machine's cores by need (stages/core_share.h), so a stage holding the
// only batch in the ring uses every core and two busy stages use half each
// instead of oversubscribing them. Threads left out of a call do not spin;
// they sleep until a call needs them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace kvasir::cpu {

// How many threads a call may use, asked at each call: fn(ctx), clamped to
// [1, size()]. No fn: all of them.
struct PoolWidth {
  int (*fn)(const void* ctx) = nullptr;
  const void* ctx = nullptr;
};

class ThreadPool {
 public:
  // n_threads >= 1 (the caller counts as one). spin_us: how long an idle
  // worker polls for the next job before sleeping (0: sleep at once).
  explicit ThreadPool(int n_threads, int spin_us = 50);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The most threads a call uses (the caller counts as one).
  int size() const { return n_threads_; }

  // Sets the per-call width rule; call before the pool is shared (not
  // concurrently with parallel_for). w.fn must be cheap and thread-safe.
  void set_width(PoolWidth w) { width_ = w; }

  // The width the next call would get now.
  int width() const;

  // Calls fn(begin, end, thread_index) on disjoint chunks covering [0, n),
  // thread_index < width() (one thread may run several chunks, in turn);
  // returns when all are done. fn is any callable (lambda, std::function).
  static constexpr int kChunksPerThread = 4;
  template <class F>
  void parallel_for(int64_t n, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    run(
        n,
        [](const void* ctx, int64_t b, int64_t e, int t) {
          (*static_cast<Fn*>(const_cast<void*>(ctx)))(b, e, t);
        },
        static_cast<const void*>(std::addressof(fn)));
  }

 private:
  using Call = void (*)(const void* ctx, int64_t begin, int64_t end, int thread);

  void run(int64_t n, Call call, const void* ctx);
  void run_chunks(int index, uint64_t job);
  void worker(int index);

  int n_threads_;
  int spin_us_;
  PoolWidth width_;
  std::vector<std::thread> threads_;
  std::mutex call_mu_;  // serialises outside callers
  std::mutex mu_;       // guards sleeping and waking
  std::condition_variable wake_, done_;
  // The current job's number << 16 | its width: one word, so a worker that
  // reads it knows at once whether it takes part in that job.
  std::atomic<uint64_t> job_{0};
  // The current job's number (low 32 bits) << 32 | its next unclaimed
  // chunk: a thread that claims a chunk by CAS knows it is of the job it
  // read, and the job cannot end before that chunk is done.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> chunks_{0};  // the current job's chunk count
  std::atomic<int64_t> done_chunks_{0};
  std::atomic<bool> stop_{false};
  // The current job; written by the caller before job_ and claim_ move.
  Call call_ = nullptr;
  const void* ctx_ = nullptr;
  int64_t n_ = 0;
  std::mutex error_mu_;
  std::exception_ptr error_;
};

}  // namespace kvasir::cpu
