#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "base/check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KV_CPU_RELAX() _mm_pause()
#else
#define KV_CPU_RELAX() std::this_thread::yield()
#endif

namespace kvasir::cpu {
namespace {

thread_local bool t_in_pool = false;  // inside a task: nested calls run inline

// Polls pred for about spin_us microseconds; true if it became true.
template <class Pred>
bool spin_until(int spin_us, Pred pred) {
  if (spin_us <= 0) return pred();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
      KV_CPU_RELAX();
    }
    if (std::chrono::steady_clock::now() >= deadline) return pred();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads, int spin_us) : n_threads_(n_threads), spin_us_(spin_us) {
  KV_CHECK(n_threads >= 1 && n_threads <= 1024, "thread pool: {} threads (want 1..1024)",
           n_threads);
  threads_.reserve(size_t(n_threads - 1));
  for (int i = 1; i < n_threads; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lk(mu_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

int ThreadPool::width() const {
  if (!width_.fn) return n_threads_;
  return std::clamp(width_.fn(width_.ctx), 1, n_threads_);
}

void ThreadPool::run_chunk(int index, int width) {
  const int64_t begin = n_ * index / width;
  const int64_t end = n_ * (index + 1) / width;
  if (begin >= end) return;
  try {
    call_(ctx_, begin, end, index);
  } catch (...) {
    std::lock_guard lk(error_mu_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::run(int64_t n, Call call, const void* ctx) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n == 1 || t_in_pool) {
    call(ctx, 0, n, 0);
    return;
  }
  std::lock_guard call_lk(call_mu_);
  const int w = width();
  if (w == 1) {
    call(ctx, 0, n, 0);
    return;
  }
  call_ = call;
  ctx_ = ctx;
  n_ = n;
  error_ = nullptr;
  pending_.store(w - 1, std::memory_order_relaxed);
  {
    std::lock_guard lk(mu_);
    const uint64_t next = ((job_.load(std::memory_order_relaxed) >> 16) + 1) << 16;
    job_.store(next | uint64_t(w), std::memory_order_release);
  }
  wake_.notify_all();

  t_in_pool = true;
  run_chunk(0, w);
  t_in_pool = false;

  auto all_done = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(spin_us_, all_done)) {
    std::unique_lock lk(mu_);
    done_.wait(lk, all_done);
  }
  if (error_) {
    std::exception_ptr e = std::exchange(error_, nullptr);
    std::rethrow_exception(e);
  }
}

void ThreadPool::worker(int index) {
  t_in_pool = true;
  uint64_t seen = 0;
  bool took_part = true;  // spin for the next job only after working on one
  for (;;) {
    auto ready = [&] {
      return stop_.load(std::memory_order_acquire) || job_.load(std::memory_order_acquire) != seen;
    };
    if (!took_part || !spin_until(spin_us_, ready)) {
      std::unique_lock lk(mu_);
      wake_.wait(lk, ready);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = job_.load(std::memory_order_acquire);
    // A job narrower than this thread's index runs without it: it neither
    // works nor counts, and sleeps (no spinning on a core another stage
    // may want). The job cannot end before its takers are done, so the
    // word read here is the job those takers work on.
    const int w = int(seen & 0xffff);
    took_part = index < w;
    if (!took_part) continue;
    run_chunk(index, w);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lk(mu_);
      done_.notify_one();
    }
  }
}

}  // namespace kvasir::cpu
