#include "kernels/cpu/simd.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace kvasir::cpu {
namespace {

SimdLevel detect() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    return SimdLevel::kAvx2;
#endif
  return SimdLevel::kScalar;
}

SimdLevel initial() {
  const char* env = std::getenv("KVASIR_SIMD");
  if (env && std::strcmp(env, "scalar") == 0) return SimdLevel::kScalar;
  return detect();
}

std::atomic<int>& level_var() {
  static std::atomic<int> level{static_cast<int>(initial())};
  return level;
}

}  // namespace

SimdLevel simd_level() {
  return static_cast<SimdLevel>(level_var().load(std::memory_order_relaxed));
}

SimdLevel simd_level_supported() {
  static const SimdLevel best = detect();
  return best;
}

void set_simd_level_for_testing(SimdLevel level) {
  if (static_cast<int>(level) > static_cast<int>(simd_level_supported()))
    level = simd_level_supported();
  level_var().store(static_cast<int>(level), std::memory_order_relaxed);
}

const char* simd_level_name(SimdLevel level) {
  return level == SimdLevel::kAvx2 ? "avx2" : "scalar";
}

}  // namespace kvasir::cpu
