// bench/membw — the machine's memory bandwidth, the limit of single-stream
// decode (every weight is read once per token).
//
//   build/bin/bench_membw [threads] [MiB per array] [repetitions]
//
// A STREAM-like triad a[i] = b[i] + s·c[i] over three arrays of doubles, each
// (by default) twice the last-level cache and at least 256 MiB, split over
// the threads in contiguous chunks that each thread first-touches; counted
// as STREAM counts it: 24 bytes per element (two reads, one write; the
// write-allocate read not counted). Also a read-only pass (Σ b[i]), the
// access pattern of decode. Prints the best of the repetitions (and the
// median), then one line for scripts:
//   membw: threads=T triad_gbs=X read_gbs=Y triad_cpu_gbs=U read_cpu_gbs=V array_mib=M
// The *_gbs figures are by wall clock (what a running engine sees, load
// included); the *_cpu_gbs ones divide by the slowest thread's CPU time,
// i.e. the bandwidth while the threads run — on a shared, loaded machine the
// wall-clock figure also counts the time the threads waited for a core.
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int64_t llc_bytes() {
#ifdef _SC_LEVEL3_CACHE_SIZE
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) return l3;
#endif
  return 64ll << 20;
}

double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : 1;
  int64_t mib = argc > 2 ? std::atoll(argv[2]) : 0;
  if (mib <= 0) mib = std::max<int64_t>(256, 2 * llc_bytes() >> 20);
  const int reps = argc > 3 ? std::max(2, std::atoi(argv[3])) : 6;
  const int64_t n = (mib << 20) / int64_t(sizeof(double));
  std::unique_ptr<double[]> a(new double[size_t(n)]), b(new double[size_t(n)]),
      c(new double[size_t(n)]);
  double* pa = a.get();
  double* pb = b.get();
  double* pc = c.get();
  const double s = 3.0;

  std::vector<double> triad_gbs, read_gbs, triad_cpu_gbs, read_cpu_gbs;
  std::vector<double> sums(size_t(threads), 0.0);
  // Per repetition and thread: CPU seconds of the triad and of the read.
  std::vector<double> cpu_triad(size_t(reps * threads)), cpu_read(size_t(reps * threads));
  // Phase 0: first touch; then the read passes, then the triads. The main
  // thread times each pass between barriers.
  std::barrier sync(threads + 1);
  auto chunk = [&](int t, int64_t& lo, int64_t& hi) {
    lo = n * t / threads;
    hi = n * (t + 1) / threads;
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      int64_t lo, hi;
      chunk(t, lo, hi);
      for (int64_t i = lo; i < hi; ++i) {
        pa[i] = 0.0;
        pb[i] = 1.0;
        pc[i] = 2.0;
      }
      sync.arrive_and_wait();
      // All the read passes first: a read pass right after a triad competes
      // with the write-back of the triad's dirty lines (measured: -35%).
      for (int r = 0; r < reps; ++r) {
        sync.arrive_and_wait();  // start read
        const double c0 = thread_seconds();
        // Eight independent sums: one would be bound by the add latency.
        double acc[8] = {};
        int64_t i = lo;
        for (; i + 8 <= hi; i += 8)
          for (int k = 0; k < 8; ++k) acc[k] += pb[i + k];
        for (; i < hi; ++i) acc[0] += pb[i];
        double sum = 0.0;
        for (double v : acc) sum += v;
        cpu_read[size_t(r * threads + t)] = thread_seconds() - c0;
        sums[size_t(t)] += sum;
        sync.arrive_and_wait();  // end read
      }
      for (int r = 0; r < reps; ++r) {
        sync.arrive_and_wait();  // start triad
        const double c0 = thread_seconds();
        for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
        cpu_triad[size_t(r * threads + t)] = thread_seconds() - c0;
        sync.arrive_and_wait();  // end triad
      }
    });
  sync.arrive_and_wait();
  for (int r = 0; r < reps; ++r) {
    sync.arrive_and_wait();
    const auto t0 = Clock::now();
    sync.arrive_and_wait();
    read_gbs.push_back(8.0 * double(n) / std::chrono::duration<double>(Clock::now() - t0).count() *
                       1e-9);
  }
  for (int r = 0; r < reps; ++r) {
    sync.arrive_and_wait();
    const auto t0 = Clock::now();
    sync.arrive_and_wait();
    triad_gbs.push_back(24.0 * double(n) /
                        std::chrono::duration<double>(Clock::now() - t0).count() * 1e-9);
  }
  for (auto& th : pool) th.join();
  for (int r = 0; r < reps; ++r) {
    const auto slowest = [&](const std::vector<double>& v) {
      return *std::max_element(v.begin() + r * threads, v.begin() + (r + 1) * threads);
    };
    triad_cpu_gbs.push_back(24.0 * double(n) / slowest(cpu_triad) * 1e-9);
    read_cpu_gbs.push_back(8.0 * double(n) / slowest(cpu_read) * 1e-9);
  }
  double check = 0;
  for (double v : sums) check += v;
  if (check != double(reps) * double(n)) std::fprintf(stderr, "membw: read check failed\n");

  const double best_triad = *std::max_element(triad_gbs.begin(), triad_gbs.end());
  const double best_read = *std::max_element(read_gbs.begin(), read_gbs.end());
  std::printf("membw: %d thread(s), 3 arrays x %lld MiB (last-level cache %lld MiB), %d reps\n",
              threads, (long long)mib, (long long)(llc_bytes() >> 20), reps);
  const double best_triad_cpu = *std::max_element(triad_cpu_gbs.begin(), triad_cpu_gbs.end());
  const double best_read_cpu = *std::max_element(read_cpu_gbs.begin(), read_cpu_gbs.end());
  std::printf(
      "triad a=b+s*c: best %.2f GB/s, median %.2f (wall); best %.2f, median %.2f (CPU time)\n",
      best_triad, median(triad_gbs), best_triad_cpu, median(triad_cpu_gbs));
  std::printf(
      "read  sum(b):  best %.2f GB/s, median %.2f (wall); best %.2f, median %.2f (CPU time)\n",
      best_read, median(read_gbs), best_read_cpu, median(read_cpu_gbs));
  std::printf(
      "membw: threads=%d triad_gbs=%.2f read_gbs=%.2f triad_cpu_gbs=%.2f read_cpu_gbs=%.2f "
      "array_mib=%lld\n",
      threads, best_triad, best_read, best_triad_cpu, best_read_cpu, (long long)mib);
  return 0;
}
