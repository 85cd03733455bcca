// bench/membw/peak.cpp — the machine's arithmetic limit per core, beside
// bench_membw's memory limit: what a kernel that is not waiting for memory
// can reach at most (docs/kernels.md, "What bounds decode").
//
//   build/bin/bench_peak [threads] [seconds per kind]
//
// Each thread runs independent chains of one instruction (more chains than
// its latency needs, so only the issue rate bounds them):
//   fma256   vfmadd231ps ymm      16 flop   (f32 attention, norms, the f32 paths)
//   fma512   vfmadd231ps zmm      32 flop   (if avx512f)
//   dp256    vpdpbusd ymm (VEX)   64 op     (if avx_vnni: the int8 dots of the quantised matmuls)
//   dp512    vpdpbusd zmm         128 op    (if avx512_vnni)
// and prints, per kind, G flop (or op) per second per thread by the
// thread's CPU time (the rate while it runs) and in total by wall clock,
// then one line for scripts:
//   peak: threads=T fma256=X fma512=Y dp256=Z dp512=W   (per thread, 0: not on this CPU)
#include <immintrin.h>

#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

namespace {

double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Each returns a value that depends on every chain, so nothing is dropped.
__attribute__((target("avx2,fma"), noinline)) float fma256(int64_t iters) {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(0.001f * float(i));
  const __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-4f);
  for (int64_t k = 0; k < iters; ++k)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], b, c);
  __m256 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, a[i]);
  return _mm256_cvtss_f32(s);
}

__attribute__((target("avx512f"), noinline)) float fma512(int64_t iters) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(0.001f * float(i));
  const __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-4f);
  for (int64_t k = 0; k < iters; ++k)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], b, c);
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  return out[0];
}

__attribute__((target("avx2,avxvnni"), noinline)) float dp256(int64_t iters) {
  __m256i a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_epi32(i);
  const __m256i b = _mm256_set1_epi8(3), c = _mm256_set1_epi8(-2);
  for (int64_t k = 0; k < iters; ++k)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_dpbusd_avx_epi32(a[i], b, c);
  __m256i s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_epi32(s, a[i]);
  return float(_mm256_extract_epi32(s, 0));
}

__attribute__((target("avx512f,avx512vnni"), noinline)) float dp512(int64_t iters) {
  __m512i a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_epi32(i);
  const __m512i b = _mm512_set1_epi8(3), c = _mm512_set1_epi8(-2);
  for (int64_t k = 0; k < iters; ++k)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_dpbusd_epi32(a[i], b, c);
  __m512i s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_epi32(s, a[i]);
  alignas(64) int32_t out[16];
  _mm512_store_si512(out, s);
  return float(out[0]);
}

struct Kind {
  const char* name;
  float (*fn)(int64_t);
  double ops_per_iter;  // 12 instructions per iteration
  bool present;
};

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : 1;
  const double seconds = argc > 2 ? std::atof(argv[2]) : 0.5;
  __builtin_cpu_init();
  const Kind kinds[] = {
      {"fma256", fma256, 12 * 16,
       bool(__builtin_cpu_supports("avx2")) && bool(__builtin_cpu_supports("fma"))},
      {"fma512", fma512, 12 * 32, bool(__builtin_cpu_supports("avx512f"))},
      {"dp256", dp256, 12 * 64, bool(__builtin_cpu_supports("avxvnni"))},
      {"dp512", dp512, 12 * 128,
       bool(__builtin_cpu_supports("avx512f")) && bool(__builtin_cpu_supports("avx512vnni"))},
  };
  std::printf("%d thread(s), %.2f s per kind\n", threads, seconds);
  std::string line = "peak: threads=" + std::to_string(threads);
  for (const Kind& k : kinds) {
    if (!k.present) {
      std::printf("%-7s not on this CPU\n", k.name);
      line += std::string(" ") + k.name + "=0";
      continue;
    }
    // Iterations for about `seconds`, from a short calibration run.
    const double c0 = thread_seconds();
    volatile float sink = k.fn(1 << 20);
    const double per_iter = std::max((thread_seconds() - c0) / double(1 << 20), 1e-10);
    const auto iters = int64_t(seconds / per_iter);
    std::vector<double> cpu(static_cast<size_t>(threads));
    std::barrier start(threads + 1);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        start.arrive_and_wait();
        const double t0 = thread_seconds();
        sink = k.fn(iters);
        cpu[size_t(t)] = thread_seconds() - t0;
      });
    start.arrive_and_wait();
    const auto w0 = std::chrono::steady_clock::now();
    for (auto& th : pool) th.join();
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    double per_thread = 0;
    for (double c : cpu) per_thread += double(iters) * k.ops_per_iter / c * 1e-9 / threads;
    const double total = double(iters) * k.ops_per_iter * threads / wall * 1e-9;
    std::printf("%-7s %8.1f G/s per thread (CPU time)  %8.1f G/s all threads (wall clock)\n",
                k.name, per_thread, total);
    char buf[64];
    std::snprintf(buf, sizeof buf, " %s=%.1f", k.name, per_thread);
    line += buf;
    (void)sink;
  }
  std::printf("%s\n", line.c_str());
  return 0;
}
