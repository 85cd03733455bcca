// bench/kernels/bench_logits.cpp — what a greedy row's passes over its
// logits cost (kernels/cpu/logits.h), at every SIMD level the CPU has.
//
//   build/bin/bench_kernels_logits [seconds per case]
//
// One thread, timed by process CPU time (steady on a shared machine). Per
// vocabulary (SmolLM2's 49,152, Llama 3's 128,256, Gemma 3's 262,144) and
// level: the sanitise-and-max pass, the exp sum (the chosen token's
// logprob), the first-equal scan for the argmax (at the row's end, the
// worst case), and the three together, in microseconds a row.
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>

#include "kernels/cpu/logits.h"
#include "kernels/cpu/simd.h"

using namespace kvasir::cpu;

namespace {

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

template <class F>
double us_per_call(double budget, F&& f) {
  f();  // warm-up
  long calls = 0;
  const double t0 = cpu_seconds();
  double t = t0;
  while (t - t0 < budget) {
    for (int k = 0; k < 8; ++k) f();
    calls += 8;
    t = cpu_seconds();
  }
  return 1e6 * (t - t0) / double(calls);
}

}  // namespace

int main(int argc, char** argv) {
  const double budget = argc > 1 ? std::atof(argv[1]) : 0.3;
  std::printf("cpu %s, one thread, process CPU time\n", cpu_model_name().c_str());
  std::printf("%-7s %-12s %10s %10s %10s %10s\n", "vocab", "level", "max us", "expsum us",
              "find us", "row us");
  volatile double sink = 0;
  for (int32_t n : {49152, 128256, 262144}) {
    std::mt19937 rng(1);
    std::normal_distribution<float> d(0.f, 4.f);
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = d(rng);
    x[size_t(n - 1)] = 1000.f;  // the argmax last: the scan's worst case
    for (int l = 0; l < kSimdLevels; ++l) {
      const SimdLevel level = SimdLevel(l);
      if (!simd_level_available(level)) continue;
      set_simd_level_for_testing(level);
      float mx = 0;
      const double t_max = us_per_call(budget, [&] { mx = logits_sanitize_max(x.data(), n); });
      const double t_sum =
          us_per_call(budget, [&] { sink = sink + logits_exp_sum(x.data(), n, mx, 1.f, nullptr); });
      const double t_find =
          us_per_call(budget, [&] { sink = sink + logits_find(x.data(), n, mx); });
      std::printf("%-7d %-12s %10.1f %10.1f %10.1f %10.1f\n", n, simd_level_name(level), t_max,
                  t_sum, t_find, t_max + t_sum + t_find);
    }
  }
  simd_reset_for_testing();
  return 0;
}
