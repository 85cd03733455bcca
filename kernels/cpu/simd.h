// kernels/cpu/simd.h — which SIMD paths the CPU kernels use.
//
// The library is built without -march flags; SIMD code lives in functions
// marked __attribute__((target(...))) and is chosen at run time, so one
// binary runs on any x86-64 (and anything else through the scalar path).
//
// Levels (each a set of CPU flags; a level's kernels use only its flags):
//   kScalar      portable C++
//   kAvx2        avx2 + fma + f16c: every kernel
//   kAvxVnni     kAvx2 + a 256-bit vpdpbusd: the VEX one (avxvnni: Alder
//                Lake, Sapphire Rapids, Zen 5) or else the EVEX one
//                (avx512vnni + avx512vl: Ice Lake, Zen 4). The quantised
//                integer dots (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K) use it.
//   kAvx512      kAvx2 + avx512f/bw/vl: quantised dots 512 bits wide (two
//                blocks per instruction) with vpmaddubsw / vpmaddwd
//   kAvx512Vnni  kAvx512 + avx512vnni: the same with the EVEX vpdpbusd
//                (Ice Lake, Sapphire Rapids, Zen 4). Does not need avxvnni.
// Kernels without a path of their own at a level use the one below it
// (norms, attention and the F16/BF16/F32 matmuls: AVX2).
//
// Which level runs. KVASIR_SIMD=<level> (scalar, avx2, avx_vnni, avx512,
// avx512_vnni; clamped to what the CPU has) forces one level on every
// kernel. Otherwise ("auto", the default) the widest level is not assumed to
// be the fastest: matmul picks a level per kernel — weight type × rows class
// (decode: fewer than 4 activation rows; batch: 4 or more) — by timing the
// candidate levels on the first call that needs that kernel, on a synthetic
// weight with that call's number of columns (a few milliseconds per weight
// type, once per process). simd_kernel_choice() says what was picked and why.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"

namespace kvasir::cpu {

enum class SimdLevel { kScalar = 0, kAvx2 = 1, kAvxVnni = 2, kAvx512 = 3, kAvx512Vnni = 4 };
constexpr int kSimdLevels = 5;

// The widest level the kernels may use now: the forced level, or (auto) the
// best the CPU supports. Kernels without a per-kernel choice (norms, RoPE,
// attention) use it as is.
SimdLevel simd_level();

// Whether the level is forced (KVASIR_SIMD, set_simd_level_for_testing): then
// every kernel runs at it and nothing is measured.
bool simd_level_forced();

// The best level this CPU supports.
SimdLevel simd_level_supported();

// Whether this CPU can run the given level (kAvxVnni and kAvx512 are
// independent: a CPU may have either without the other).
bool simd_level_available(SimdLevel level);

// The CPU feature flags a level needs beyond kAvx2, for messages
// ("avx512vnni (and avx512f/bw/vl)"); "" for kScalar.
const char* simd_level_flags(SimdLevel level);

// Forces a level; one the CPU cannot run falls back to the best available
// level below it. For tests and benchmarks: call it only while no kernel runs.
void set_simd_level_for_testing(SimdLevel level);

// Back to the start-up mode (KVASIR_SIMD, or auto) and forgets the measured
// choices (the next matmul of each kernel measures again). Tests only.
void simd_reset_for_testing();

const char* simd_level_name(SimdLevel level);

// "Intel(R) Xeon(R) Processor" (cpuid brand string); "unknown" elsewhere.
std::string cpu_model_name();

// ---- per-kernel choice (matmul) -------------------------------------------

enum class RowsClass { kDecode = 0, kBatch = 1 };
constexpr int kRowsClasses = 2;
inline RowsClass rows_class(int64_t n) {
  return n >= 4 ? RowsClass::kBatch : RowsClass::kDecode;
}
const char* rows_class_name(RowsClass rows);  // "decode" / "batch"

enum class ChoiceReason {
  kForced,     // KVASIR_SIMD or a test forced the level
  kOnlyPath,   // one distinct kernel among the levels the CPU has
  kMeasured,   // the fastest of the candidates, timed
  kPending,    // auto, not chosen yet (no matmul of this kernel so far)
  kInherited,  // adopted from a predecessor's summary (simd_adopt_choices)
};
const char* choice_reason_name(ChoiceReason reason);

struct KernelChoice {
  DType type = DType::F32;
  RowsClass rows = RowsClass::kDecode;
  SimdLevel level = SimdLevel::kScalar;
  ChoiceReason reason = ChoiceReason::kPending;
  // kMeasured: the probe — a weight of probe_rows × probe_cols of `type`
  // times probe_n activation rows, one thread, timed by the thread's CPU
  // time; us[l] is its best time (µs) over `rounds` interleaved rounds at
  // level l, or < 0 where not timed (the CPU lacks l, or l runs the same
  // kernel as a lower level) of one numerics family (simd_family: the
  // widest the CPU has). Choice: the fastest, a wider level only if it
  // wins by kWinMargin.
  int64_t probe_rows = 0, probe_cols = 0, probe_n = 0;
  int rounds = 0;
  double us[kSimdLevels] = {-1, -1, -1, -1, -1};
  // Batch kernels on a CPU with AMX-INT8 (amx.h): whether the tiles run
  // instead of `level` (from 16 activation rows; below that, `level`), and
  // their probe time (< 0: not timed — no AMX, no AMX path for the type, or
  // the tiles failed their self-check against `level`).
  bool amx = false;
  double amx_us = -1;
  // ... and for weights kept packed (amx.h amx_keep_packed: no packing per
  // call), the tiles from amx_packed_rows activation rows (0: never below
  // 16 — then `amx` decides), from the same probe timed packed
  // (amx_packed_us): a tile costs the same for any row count up to 16, the
  // AVX-512 kernels in proportion to it.
  int amx_packed_rows = 0;
  double amx_packed_us = -1;
  // One line: "Q4_1 decode: avx2 (measured: avx2 10.1 us, avx_vnni 8.9 us, ...)".
  std::string describe() const;
};
constexpr double kWinMargin = 0.03;

// Numerics families: the levels of one family give bit-identical results
// (the same integer block sums, the same f32 operations in the same order),
// so choosing among them by speed changes nothing but speed. The 256-bit
// family (avx2, avx_vnni) and the 512-bit one (avx512, avx512_vnni) add the
// f32 products in different orders: the logits differ in the last bits, and
// greedy continuations can part at near-ties (3 of 4 prompts over 128
// tokens of the default model). A measured choice that flipped between
// families from one process to the next would make a ring's stages or two
// runs disagree, so auto mode never times families against each other: a
// kernel runs in the widest family the CPU has (KVASIR_SIMD picks another).
// 0: scalar, 1: 256-bit, 2: 512-bit.
inline int simd_family(SimdLevel level) {
  return level == SimdLevel::kScalar ? 0 : level >= SimdLevel::kAvx512 ? 2 : 1;
}
// AMX tiles (another f32 order) replace a batch kernel only when faster by
// this margin, which the probe's noise does not cross.
constexpr double kFamilyMargin = 0.15;

// The level matmul uses for this kernel. In auto mode a kernel not chosen
// yet is measured now when cols > 0 (the probe's columns; a multiple of the
// type's block), else reported kPending.
KernelChoice simd_kernel_choice(DType type, RowsClass rows, int64_t cols = 0);

// Every choice made so far (auto), or every kernel's forced level, in type
// and rows-class order.
std::vector<KernelChoice> simd_kernel_choices();

// Adopts the kernel choices a summary lists (format_simd_summary's entries,
// "q4_1/batch:avx512_vnni", "...+amx", "...+amx+p8"), so a restarted stage computes the
// same bits as the process it replaces: a measured choice can cross
// families between processes on a loaded machine, and a ring that changed
// family mid-stream gave other greedy tokens after a stage restart than
// before it (docs/recovery.md). Skipped: entries it cannot parse, kernels
// already chosen, a level above simd_level() or one the CPU lacks, AMX
// where it is not usable; a forced level adopts nothing. Returns how many
// it adopted.
int simd_adopt_choices(std::string_view summary);

// How many times the set of choices changed in this process (a kernel
// chosen, the choices forgotten): a caller that keeps a summary of them
// redoes it only when this moved.
uint64_t simd_choices_generation();

// ---- the one-line summary (a stage's `simd` in /kvasir/v1/stats) ----------
//
// "cpu:<widest> amx:<yes|no>" — the widest level this CPU has, and whether
// the AMX-INT8 tiles are usable — then, forced, "forced:<level>" (every
// kernel runs at it), else each kernel chosen so far as
// "<type>/<rows>:<level>", with "+amx" where the batch kernel runs the tiles
// from their row count and "+pN" where it runs them from N rows for weights
// kept packed: "cpu:avx512_vnni amx:no q4_1/decode:avx2
// q4_1/batch:avx512_vnni q8_0/decode:avx2". Types in lower case, in
// simd_kernel_choices() order, after "<type>/rows16:<level>" for each type
// of rows16_types (weights kept repacked, kernels/cpu/rows16.h: they run
// rows16 at `level`, simd_level(), at every row count; a restart adopts
// nothing from it). Never longer than max_len: whole entries are dropped
// from the end and " ..." says so.
std::string format_simd_summary(SimdLevel widest, bool amx_usable, bool forced,
                                SimdLevel forced_level, const std::vector<KernelChoice>& choices,
                                size_t max_len, const std::vector<DType>& rows16_types = {},
                                SimdLevel level = SimdLevel::kScalar);
// This process's summary now (cached until simd_choices_generation() moves).
std::string simd_summary(size_t max_len);
// A weight type as the summary writes it: dtype_name in lower case ("q4_1").
std::string simd_type_name(DType type);

// Several lines for logs and `--simd-info`: the CPU model, the levels it has
// and lacks, the mode, and simd_kernel_choices().
std::string simd_report();

}  // namespace kvasir::cpu
