// kernels/cpu/simd.h — which SIMD paths the CPU kernels use.
//
// The library is built without -march flags; SIMD code lives in functions
// marked __attribute__((target(...))) and is chosen at run time, so one
// binary runs on any x86-64 (and anything else through the scalar path).
//
// Levels, each implying the ones before it except where noted:
//   kScalar      portable C++
//   kAvx2        avx2 + fma + f16c: every kernel
//   kAvxVnni     kAvx2 + avxvnni: the quantised integer dots use the
//                256-bit VEX vpdpbusd (Alder Lake, Sapphire Rapids, Zen 5)
//   kAvx512      kAvx2 + avx512f/bw/vl: quantised dots 512 bits wide
//                (two blocks per instruction) with vpmaddubsw / vpmaddwd
//   kAvx512Vnni  kAvx512 + avx512vnni: the same with the EVEX vpdpbusd
//                (Ice Lake, Sapphire Rapids, Zen 4). Does not need avxvnni.
// Kernels without a path of their own at a level use the AVX2 one.
// The level starts as the best the CPU supports, or KVASIR_SIMD names one
// (scalar, avx2, avx_vnni, avx512, avx512_vnni; clamped to what the CPU has).
#pragma once

namespace kvasir::cpu {

enum class SimdLevel { kScalar = 0, kAvx2 = 1, kAvxVnni = 2, kAvx512 = 3, kAvx512Vnni = 4 };
constexpr int kSimdLevels = 5;

// The level the kernels use now.
SimdLevel simd_level();

// The best level this CPU supports.
SimdLevel simd_level_supported();

// Whether this CPU can run the given level (kAvxVnni and kAvx512 are
// independent: a CPU may have either without the other).
bool simd_level_available(SimdLevel level);

// The CPU feature flags a level needs beyond the previous one, for messages
// ("avx512vnni"); "" for kScalar.
const char* simd_level_flags(SimdLevel level);

// Forces a level; one the CPU cannot run falls back to the best available
// level below it. For tests and benchmarks: call it only while no kernel runs.
void set_simd_level_for_testing(SimdLevel level);

const char* simd_level_name(SimdLevel level);

}  // namespace kvasir::cpu
