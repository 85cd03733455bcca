#include "kernels/cpu/simd.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace kvasir::cpu {
namespace {

constexpr const char* kNames[kSimdLevels] = {"scalar", "avx2", "avx_vnni", "avx512", "avx512_vnni"};

#if defined(__x86_64__) || defined(__i386__)
// CPUID bit `bit` of register reg (0 eax, 1 ebx, 2 ecx, 3 edx) of leaf/sub.
// For the flags clang 14's __builtin_cpu_supports does not name (f16c,
// avxvnni); their register state is that of AVX, which the avx2 check
// (OS support included) already covers.
bool cpuid_bit(unsigned leaf, unsigned sub, int reg, int bit) {
  unsigned r[4];
  if (!__get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3])) return false;
  return (r[reg] >> bit) & 1u;
}
#endif

bool cpu_has(SimdLevel level) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    cpuid_bit(1, 0, 2, 29);  // f16c
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  switch (level) {
    case SimdLevel::kScalar:
      return true;
    case SimdLevel::kAvx2:
      return avx2;
    case SimdLevel::kAvxVnni:
      return avx2 && cpuid_bit(7, 1, 0, 4);  // avxvnni
    case SimdLevel::kAvx512:
      return avx512;
    case SimdLevel::kAvx512Vnni:
      return avx512 && __builtin_cpu_supports("avx512vnni");
  }
  return false;
#else
  return level == SimdLevel::kScalar;
#endif
}

SimdLevel best_at_most(SimdLevel cap) {
  for (int l = static_cast<int>(cap); l > 0; --l)
    if (cpu_has(static_cast<SimdLevel>(l))) return static_cast<SimdLevel>(l);
  return SimdLevel::kScalar;
}

SimdLevel initial() {
  SimdLevel cap = SimdLevel::kAvx512Vnni;
  if (const char* env = std::getenv("KVASIR_SIMD"))
    for (int l = 0; l < kSimdLevels; ++l)
      if (std::strcmp(env, kNames[l]) == 0) cap = static_cast<SimdLevel>(l);
  return best_at_most(cap);
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
  static const SimdLevel best = best_at_most(SimdLevel::kAvx512Vnni);
  return best;
}

bool simd_level_available(SimdLevel level) {
  return cpu_has(level);
}

const char* simd_level_flags(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar:
      return "";
    case SimdLevel::kAvx2:
      return "avx2, fma, f16c";
    case SimdLevel::kAvxVnni:
      return "avxvnni";
    case SimdLevel::kAvx512:
      return "avx512f, avx512bw, avx512vl";
    case SimdLevel::kAvx512Vnni:
      return "avx512vnni (and avx512f/bw/vl)";
  }
  return "?";
}

void set_simd_level_for_testing(SimdLevel level) {
  level_var().store(static_cast<int>(best_at_most(level)), std::memory_order_relaxed);
}

const char* simd_level_name(SimdLevel level) {
  const int l = static_cast<int>(level);
  return l >= 0 && l < kSimdLevels ? kNames[l] : "?";
}

}  // namespace kvasir::cpu
