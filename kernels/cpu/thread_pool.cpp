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

// Claims and runs chunks of job `job` until none is left (or the job is
// another's: this thread read its word late).
void ThreadPool::run_chunks(int index, uint64_t job) {
  const uint64_t tag = (job & 0xffffffffu) << 32;
  for (;;) {
    uint64_t c = claim_.load(std::memory_order_acquire);
    int64_t chunk = 0;
    for (;;) {
      if ((c & ~uint64_t(0xffffffffu)) != tag) return;
      chunk = int64_t(c & 0xffffffffu);
      if (chunk >= chunks_.load(std::memory_order_relaxed)) return;
      if (claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel)) break;
    }
    const int64_t nc = chunks_.load(std::memory_order_relaxed);
    const int64_t begin = n_ * chunk / nc, end = n_ * (chunk + 1) / nc;
    try {
      if (begin < end) call_(ctx_, begin, end, index);
    } catch (...) {
      std::lock_guard lk(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    if (done_chunks_.fetch_add(1, std::memory_order_acq_rel) + 1 == nc && index != 0) {
      std::lock_guard lk(mu_);
      done_.notify_one();
    }
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
  const int64_t chunks = std::min<int64_t>(n, int64_t(w) * kChunksPerThread);
  chunks_.store(chunks, std::memory_order_relaxed);
  done_chunks_.store(0, std::memory_order_relaxed);
  const uint64_t number = (job_.load(std::memory_order_relaxed) >> 16) + 1;
  claim_.store((number & 0xffffffffu) << 32, std::memory_order_release);
  {
    std::lock_guard lk(mu_);
    job_.store(number << 16 | uint64_t(w), std::memory_order_release);
  }
  wake_.notify_all();

  t_in_pool = true;
  run_chunks(0, number);
  t_in_pool = false;

  auto all_done = [this, chunks] { return done_chunks_.load(std::memory_order_acquire) == chunks; };
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
    // may want). A job that ended before this thread looked leaves it no
    // chunk to claim (run_chunks checks the job's number with each claim).
    const int w = int(seen & 0xffff);
    took_part = index < w;
    if (!took_part) continue;
    run_chunks(index, seen >> 16);
  }
}

}  // namespace kvasir::cpu
