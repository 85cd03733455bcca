#include "kernels/cpu/thread_pool.h"

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

void ThreadPool::run_chunk(int index) {
  const int64_t begin = n_ * index / n_threads_;
  const int64_t end = n_ * (index + 1) / n_threads_;
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
  call_ = call;
  ctx_ = ctx;
  n_ = n;
  error_ = nullptr;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard lk(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();

  t_in_pool = true;
  run_chunk(0);
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
  for (;;) {
    auto ready = [&] {
      return stop_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!spin_until(spin_us_, ready)) {
      std::unique_lock lk(mu_);
      wake_.wait(lk, ready);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    run_chunk(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lk(mu_);
      done_.notify_one();
    }
  }
}

}  // namespace kvasir::cpu
