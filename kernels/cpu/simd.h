// kernels/cpu/simd.h — which SIMD paths the CPU kernels use.
//
// The library is built without -march flags; AVX2 code lives in functions
// marked __attribute__((target("avx2,fma,f16c"))) and is chosen at run time.
// The level starts as the best the CPU supports (AVX2 needs avx2, fma and
// f16c), or kScalar when the environment variable KVASIR_SIMD=scalar is set.
#pragma once

namespace kvasir::cpu {

enum class SimdLevel { kScalar = 0, kAvx2 = 1 };

// The level the kernels use now.
SimdLevel simd_level();

// The best level this CPU supports.
SimdLevel simd_level_supported();

// Forces a level (clamped to what the CPU supports). For tests and
// benchmarks: call it only while no kernel runs.
void set_simd_level_for_testing(SimdLevel level);

const char* simd_level_name(SimdLevel level);

}  // namespace kvasir::cpu
