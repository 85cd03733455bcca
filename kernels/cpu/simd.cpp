#include "kernels/cpu/simd.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/matmul_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define KV_HAVE_X86 1
#endif

namespace kvasir::cpu {
namespace {

constexpr const char* kNames[kSimdLevels] = {"scalar", "avx2", "avx_vnni", "avx512", "avx512_vnni"};

// What the CPU has, read once: in a virtual machine every CPUID instruction
// exits to the hypervisor: read on every matmul call, it added tens of
// microseconds to each (docs/measurements/2026-12-01.md).
struct CpuFlags {
  bool level[kSimdLevels] = {};
  bool vex_vnni = false, evex_vnni256 = false;
};

#ifdef KV_HAVE_X86
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

CpuFlags read_cpu_flags() {
  CpuFlags f;
  f.level[int(SimdLevel::kScalar)] = true;
#ifdef KV_HAVE_X86
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    cpuid_bit(1, 0, 2, 29);  // f16c
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  f.vex_vnni = avx2 && cpuid_bit(7, 1, 0, 4);  // avxvnni
  f.evex_vnni256 = avx2 && __builtin_cpu_supports("avx512f") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  f.level[int(SimdLevel::kAvx2)] = avx2;
  f.level[int(SimdLevel::kAvxVnni)] = f.vex_vnni || f.evex_vnni256;
  f.level[int(SimdLevel::kAvx512)] = avx512;
  f.level[int(SimdLevel::kAvx512Vnni)] = avx512 && __builtin_cpu_supports("avx512vnni");
#endif
  return f;
}

const CpuFlags& cpu_flags() {
  static const CpuFlags flags = read_cpu_flags();
  return flags;
}

bool cpu_has(SimdLevel level) {
  return cpu_flags().level[static_cast<int>(level)];
}

SimdLevel best_at_most(SimdLevel cap) {
  for (int l = static_cast<int>(cap); l > 0; --l)
    if (cpu_has(static_cast<SimdLevel>(l))) return static_cast<SimdLevel>(l);
  return SimdLevel::kScalar;
}

// The level variable: bits 0-3 the level, kForcedBit when forced.
constexpr int kForcedBit = 16;

int startup_state() {
  if (const char* env = std::getenv("KVASIR_SIMD"))
    for (int l = 0; l < kSimdLevels; ++l)
      if (std::strcmp(env, kNames[l]) == 0)
        return static_cast<int>(best_at_most(static_cast<SimdLevel>(l))) | kForcedBit;
  return static_cast<int>(best_at_most(SimdLevel::kAvx512Vnni));
}

std::atomic<int>& state_var() {
  static std::atomic<int> state{startup_state()};
  return state;
}

}  // namespace

bool detail::cpu_has_vex_vnni() {
  return cpu_flags().vex_vnni;
}

bool detail::cpu_has_evex_vnni256() {
  return cpu_flags().evex_vnni256;
}

SimdLevel simd_level() {
  return static_cast<SimdLevel>(state_var().load(std::memory_order_relaxed) & 15);
}

bool simd_level_forced() {
  return (state_var().load(std::memory_order_relaxed) & kForcedBit) != 0;
}

SimdLevel simd_level_supported() {
  return best_at_most(SimdLevel::kAvx512Vnni);
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
      return "avxvnni (or avx512vnni + avx512vl)";
    case SimdLevel::kAvx512:
      return "avx512f, avx512bw, avx512vl";
    case SimdLevel::kAvx512Vnni:
      return "avx512vnni (and avx512f/bw/vl)";
  }
  return "?";
}

void set_simd_level_for_testing(SimdLevel level) {
  state_var().store(static_cast<int>(best_at_most(level)) | kForcedBit, std::memory_order_relaxed);
}

void simd_reset_for_testing() {
  state_var().store(startup_state(), std::memory_order_relaxed);
  detail::forget_kernel_choices();
}

const char* simd_level_name(SimdLevel level) {
  const int l = static_cast<int>(level);
  return l >= 0 && l < kSimdLevels ? kNames[l] : "?";
}

std::string cpu_model_name() {
#ifdef KV_HAVE_X86
  unsigned r[4];
  if (!__get_cpuid(0x80000000u, &r[0], &r[1], &r[2], &r[3]) || r[0] < 0x80000004u) return "unknown";
  char brand[49] = {};
  for (unsigned leaf = 0; leaf < 3; ++leaf) {
    __get_cpuid(0x80000002u + leaf, &r[0], &r[1], &r[2], &r[3]);
    std::memcpy(brand + 16 * leaf, r, 16);
  }
  const std::string s(brand);
  const size_t b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
  return b == std::string::npos ? "unknown" : s.substr(b, e - b + 1);
#else
  return "unknown";
#endif
}

}  // namespace kvasir::cpu
