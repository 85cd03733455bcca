// The per-kernel SIMD level choice (kernels/cpu/simd.h): a forced level runs
// on every kernel and nothing is measured (deterministic); auto measures each
// kernel once and keeps the fastest candidate. Levels the CPU lacks are
// reported as skipped, with the missing flags named.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "kernels/cpu/amx.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/simd.h"
#include "reference.h"

namespace kvasir::cpu {
namespace {

const DType kTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                        DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::MXFP4,
                        DType::F16,  DType::BF16, DType::F32};

int64_t cols_for(DType t) {
  return dtype_info(t).block == 256 ? 768 : 576;
}

struct SimdGuard {
  ~SimdGuard() { simd_reset_for_testing(); }
};

std::vector<float> random_x(int64_t n, int64_t cols, std::mt19937& rng) {
  std::vector<float> x(size_t(n * cols));
  std::normal_distribution<float> d(0.f, 1.f);
  for (auto& v : x) v = d(rng);
  return x;
}

class ForcedLevel : public ::testing::TestWithParam<int> {};

// Forcing a level: every kernel reports it, twice the same, and matmul gives
// bit for bit what that level's kernels give.
TEST_P(ForcedLevel, EveryKernelRunsTheForcedLevel) {
  const auto level = SimdLevel(GetParam());
  if (!simd_level_available(level))
    GTEST_SKIP() << simd_level_name(level) << ": this CPU lacks " << simd_level_flags(level)
                 << " (compiled, not executed here)";
  SimdGuard guard;
  set_simd_level_for_testing(level);
  ASSERT_TRUE(simd_level_forced());
  ASSERT_EQ(simd_level(), level);
  std::mt19937 rng(17);
  for (DType t : kTypes) {
    for (int64_t n : {1, 5}) {
      const RowsClass rc = rows_class(n);
      const KernelChoice a = simd_kernel_choice(t, rc, cols_for(t));
      const KernelChoice b = simd_kernel_choice(t, rc, cols_for(t));
      EXPECT_EQ(a.reason, ChoiceReason::kForced) << a.describe();
      EXPECT_EQ(a.level, level) << a.describe();
      EXPECT_EQ(b.level, a.level);
      EXPECT_EQ(detail::kernel_level(t, rc, cols_for(t)), level);

      const auto w = ref::random_weight(t, 33, cols_for(t), rng);
      const auto x = random_x(n, cols_for(t), rng);
      std::vector<float> y(size_t(n * 33)), want(y.size());
      matmul(w.view, x.data(), n, y.data(), nullptr);
      detail::matmul_at(w.view, x.data(), n, want.data(), nullptr, level);
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_EQ(y[i], want[i]) << dtype_name(t) << " n=" << n << " " << simd_level_name(level);
    }
  }
  const auto all = simd_kernel_choices();
  EXPECT_EQ(all.size(), std::size(kTypes) * kRowsClasses);
  for (const auto& c : all) EXPECT_EQ(c.level, level) << c.describe();
}

INSTANTIATE_TEST_SUITE_P(Dispatch, ForcedLevel, ::testing::Range(0, kSimdLevels),
                         [](const auto& info) { return simd_level_name(SimdLevel(info.param)); });

bool env_forces() {
  return std::getenv("KVASIR_SIMD") != nullptr && simd_level_forced();
}

// What a kernel not measured yet reports when asked without columns:
// pending, except on a CPU whose widest level is AVX2, where every kernel
// has one vector path and is chosen on the spot, so the tests below cannot
// expect pending everywhere.
ChoiceReason unmeasured() {
  return simd_level_supported() == SimdLevel::kAvx2 ? ChoiceReason::kOnlyPath
                                                    : ChoiceReason::kPending;
}

// The widest level the CPU has that runs a kernel of its own for the type
// (a level whose kernel a lower level also runs is that lower level).
SimdLevel widest_own_path(DType t) {
  for (int l = int(simd_level_supported()); l > 0; --l) {
    if (!simd_level_available(SimdLevel(l))) continue;
    bool own = true;
    for (int b = 0; b < l; ++b)
      if (simd_level_available(SimdLevel(b)) &&
          detail::dot_kernel(t, SimdLevel(b)) == detail::dot_kernel(t, SimdLevel(l)))
        own = false;
    if (own) return SimdLevel(l);
  }
  return SimdLevel::kScalar;
}

// A type's decode and batch kernels land in one numerics family, whichever
// is chosen first: a position computed alone (a decode) and with others (a
// prompt chunk, a recompute, a speculative row) gives the same bits.
TEST(Dispatch, DecodeAndBatchKernelsShareAFamily) {
  SimdGuard guard;
  if (env_forces()) GTEST_SKIP() << "KVASIR_SIMD forces " << simd_level_name(simd_level());
  for (RowsClass first : {RowsClass::kDecode, RowsClass::kBatch}) {
    simd_reset_for_testing();
    const RowsClass second = first == RowsClass::kDecode ? RowsClass::kBatch : RowsClass::kDecode;
    for (DType t : kTypes) {
      const KernelChoice a = simd_kernel_choice(t, first, cols_for(t));
      const KernelChoice b = simd_kernel_choice(t, second, cols_for(t));
      EXPECT_EQ(simd_family(a.level), simd_family(b.level))
          << dtype_name(t) << ": " << a.describe() << " / " << b.describe();
      for (int l = 0; l < kSimdLevels; ++l) {
        if (b.us[l] >= 0) {
          EXPECT_EQ(simd_family(SimdLevel(l)), simd_family(a.level))
              << dtype_name(t) << ": " << b.describe() << " timed another family";
        }
      }
    }
  }
}

// Auto: each kernel is measured once; the choice is a level the CPU has, the
// fastest timed candidate within the margin, and it stays.
TEST(Dispatch, AutoMeasuresOnceAndKeepsTheFastest) {
  SimdGuard guard;
  simd_reset_for_testing();
  if (env_forces()) GTEST_SKIP() << "KVASIR_SIMD forces " << simd_level_name(simd_level());
  std::mt19937 rng(23);
  for (DType t : kTypes) {
    for (RowsClass rc : {RowsClass::kDecode, RowsClass::kBatch}) {
      // Without columns nothing is measured: pending, unless there is one path.
      const ChoiceReason before = simd_kernel_choice(t, rc).reason;
      EXPECT_TRUE(before == ChoiceReason::kPending || before == ChoiceReason::kOnlyPath)
          << dtype_name(t);
      const KernelChoice c = simd_kernel_choice(t, rc, cols_for(t));
      SCOPED_TRACE(c.describe());
      ASSERT_TRUE(c.reason == ChoiceReason::kMeasured || c.reason == ChoiceReason::kOnlyPath);
      EXPECT_TRUE(simd_level_available(c.level));
      EXPECT_LE(int(c.level), int(simd_level_supported()));
      // The widest family the CPU has for the type, whatever the timings.
      EXPECT_EQ(simd_family(c.level), simd_family(widest_own_path(t))) << "auto crossed families";
      if (c.reason == ChoiceReason::kMeasured) {
        ASSERT_GE(c.us[int(c.level)], 0.0);
        int timed = 0;
        for (int l = 0; l < kSimdLevels; ++l) {
          if (c.us[l] < 0) continue;
          ++timed;
          EXPECT_TRUE(simd_level_available(SimdLevel(l)));
          // Only the choice's family is timed, and nothing timed beats the
          // choice by more than the margin.
          EXPECT_EQ(simd_family(SimdLevel(l)), simd_family(c.level));
          EXPECT_LE(c.us[int(c.level)] * (1.0 - kWinMargin), c.us[l] * (1.0 + 1e-9));
        }
        EXPECT_GE(timed, 2);
      }
      // Kept: the same choice, and matmul runs it.
      const KernelChoice again = simd_kernel_choice(t, rc, cols_for(t));
      EXPECT_EQ(again.level, c.level);
      EXPECT_EQ(again.us[int(c.level)], c.us[int(c.level)]);
      EXPECT_EQ(detail::kernel_level(t, rc, 32), c.level);
      const int64_t n = rc == RowsClass::kDecode ? 1 : 4;
      const auto w = ref::random_weight(t, 7, cols_for(t), rng);
      const auto x = random_x(n, cols_for(t), rng);
      std::vector<float> y(size_t(n * 7)), want(y.size());
      matmul(w.view, x.data(), n, y.data(), nullptr);
      detail::matmul_at(w.view, x.data(), n, want.data(), nullptr, c.level);
      for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], want[i]);
    }
  }
  EXPECT_EQ(simd_kernel_choices().size(), std::size(kTypes) * kRowsClasses);
  // Forcing overrides the measured choices; the reset forgets them.
  set_simd_level_for_testing(SimdLevel::kScalar);
  EXPECT_EQ(simd_kernel_choice(DType::Q4_1, RowsClass::kDecode).level, SimdLevel::kScalar);
  simd_reset_for_testing();
  EXPECT_TRUE(simd_kernel_choices().empty());
  EXPECT_EQ(simd_kernel_choice(DType::Q4_1, RowsClass::kDecode).reason, unmeasured());
}

// A restarted stage adopts its predecessor's choices from the kernels text
// it published: the same levels (so the same bits), reported "inherited",
// and never measured again; a kernel chosen already, garbage, and levels
// the CPU lacks are skipped.
TEST(Dispatch, AdoptsThePredecessorsChoices) {
  SimdGuard guard;
  simd_reset_for_testing();
  if (env_forces()) GTEST_SKIP() << "KVASIR_SIMD forces " << simd_level_name(simd_level());
  if (!simd_level_available(SimdLevel::kAvx2)) GTEST_SKIP() << "no AVX2: one path only";
  // The narrowest vector level, which auto never picks on a wider CPU:
  // adopting it is visible.
  const std::string text = "cpu:" + std::string(simd_level_name(simd_level_supported())) +
                           " amx:no q4_1/decode:avx2 q8_0/batch:avx2 q4_0/decode:bogus "
                           "zz/decode:avx2 q4_k/sideways:avx2 ? q6_k/decode:avx2 ...";
  // q6_k decode chosen before: kept.
  const KernelChoice q6 = simd_kernel_choice(DType::Q6_K, RowsClass::kDecode, 768);
  EXPECT_EQ(simd_adopt_choices(text), 2);
  const KernelChoice q41 = simd_kernel_choice(DType::Q4_1, RowsClass::kDecode, 576);
  EXPECT_EQ(q41.level, SimdLevel::kAvx2);
  EXPECT_EQ(q41.reason, ChoiceReason::kInherited);
  EXPECT_EQ(detail::kernel_level(DType::Q8_0, RowsClass::kBatch, 576), SimdLevel::kAvx2);
  EXPECT_EQ(simd_kernel_choice(DType::Q6_K, RowsClass::kDecode, 768).level, q6.level);
  EXPECT_EQ(simd_kernel_choice(DType::Q6_K, RowsClass::kDecode, 768).reason, q6.reason);
  EXPECT_EQ(simd_kernel_choice(DType::Q4_0, RowsClass::kDecode).reason, unmeasured());
  EXPECT_NE(simd_summary(511).find("q4_1/decode:avx2"), std::string::npos) << simd_summary(511);
  // The summary a stage publishes round-trips: a fresh process adopting it
  // ends with the same choices.
  const std::string published = simd_summary(511);
  const std::vector<KernelChoice> before = simd_kernel_choices();
  simd_reset_for_testing();
  EXPECT_EQ(simd_adopt_choices(published), int(before.size()));
  const std::vector<KernelChoice> after = simd_kernel_choices();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].type, before[i].type);
    EXPECT_EQ(after[i].level, before[i].level);
    EXPECT_EQ(after[i].amx, before[i].amx);
    EXPECT_EQ(after[i].amx_packed_rows, before[i].amx_packed_rows);
  }
  // The tiles for weights kept packed: adopted where AMX is usable, else the
  // entry is skipped; a row count outside 4..16 is not an entry.
  simd_reset_for_testing();
  const int n = simd_adopt_choices("q8_0/batch:avx2+p8 q4_1/batch:avx2+p3 q4_0/batch:avx2+p");
  if (detail::amx_usable()) {
    EXPECT_EQ(n, 1);
    EXPECT_EQ(detail::kernel_amx_packed_rows(DType::Q8_0), 8);
  } else {
    EXPECT_EQ(n, 0);
  }
  EXPECT_EQ(detail::kernel_amx_packed_rows(DType::Q4_1), 0);
}

TEST(Dispatch, EnvironmentForcesALevel) {
  SimdGuard guard;
  const char* old = std::getenv("KVASIR_SIMD");
  const std::string saved = old ? old : "";
  ASSERT_EQ(setenv("KVASIR_SIMD", "scalar", 1), 0);
  simd_reset_for_testing();
  EXPECT_TRUE(simd_level_forced());
  EXPECT_EQ(simd_level(), SimdLevel::kScalar);
  EXPECT_EQ(simd_kernel_choice(DType::Q8_0, RowsClass::kBatch, 576).reason, ChoiceReason::kForced);
  ASSERT_EQ(setenv("KVASIR_SIMD", "auto", 1), 0);
  simd_reset_for_testing();
  EXPECT_FALSE(simd_level_forced());
  EXPECT_EQ(simd_level(), simd_level_supported());
  if (old)
    setenv("KVASIR_SIMD", saved.c_str(), 1);
  else
    unsetenv("KVASIR_SIMD");
}

TEST(Dispatch, ReportNamesTheCpuTheModeAndTheChoices) {
  SimdGuard guard;
  simd_reset_for_testing();
  if (!env_forces()) simd_kernel_choice(DType::Q4_1, RowsClass::kDecode, 576);
  const std::string r = simd_report();
  EXPECT_NE(r.find(cpu_model_name()), std::string::npos) << r;
  EXPECT_NE(r.find("mode: "), std::string::npos) << r;
  EXPECT_NE(r.find("Q4_1 decode: "), std::string::npos) << r;
  EXPECT_NE(r.find("amx-int8: "), std::string::npos) << r;
  std::printf("%s", r.c_str());
}

}  // namespace
}  // namespace kvasir::cpu
