// AMX-INT8 matmul (kernels/cpu/amx.h). The tile arithmetic runs here as an
// emulation in C++ (the same driver and layouts as the real tiles) against
// the scalar matmul on every machine; the real tiles only where the CPU has
// amx-int8 — they have never run on the machines this was written on.
//
// Tolerance: the tiles form the same integer block sums as the scalar path,
// only the f32 order differs: |y - y_scalar| ≤ 1e-5·Σ|w·x| + 1e-6.
#include <gtest/gtest.h>

#include <random>

#include "base/check.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/simd.h"
#include "reference.h"

namespace kvasir::cpu {
namespace {

const DType kTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1};

std::vector<float> random_x(int64_t n, int64_t cols, std::mt19937& rng) {
  std::vector<float> x(size_t(n * cols));
  std::normal_distribution<float> d(0.f, 1.f);
  for (auto& v : x) v = d(rng);
  if (cols >= 64) x[0] = 40.f;  // an outlier: a wide block
  return x;
}

// Every supported type over odd shapes: rows not a multiple of 16 (a padded
// weight strip), n below, at and above one 16-row activation tile.
void check_against_scalar(bool emulate) {
  std::mt19937 rng(31);
  ThreadPool pool(3);
  for (DType t : kTypes) {
    for (int64_t cols : {32, 96, 576}) {
      for (int64_t rows : {1, 16, 37}) {
        const auto w = ref::random_weight(t, rows, cols, rng);
        for (int64_t n : {1, 15, 16, 33}) {
          const auto x = random_x(n, cols, rng);
          const auto want = ref::matmul(w.view, x.data(), n);
          std::vector<float> ys(size_t(n * rows)), ya(ys.size(), NAN);
          detail::matmul_at(w.view, x.data(), n, ys.data(), nullptr, SimdLevel::kScalar);
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            detail::amx_matmul(w.view, x.data(), n, ya.data(), p, emulate);
            for (size_t i = 0; i < ys.size(); ++i)
              ASSERT_NEAR(ya[i], ys[i], 1e-5 * want.abs_sum[i] + 1e-6)
                  << dtype_name(t) << " rows=" << rows << " cols=" << cols << " n=" << n
                  << " i=" << i << (p ? " pool" : "");
          }
        }
      }
    }
  }
}

TEST(AmxEmulated, TilesAgreeWithTheScalarMatmul) {
  check_against_scalar(/*emulate=*/true);
}

TEST(AmxHardware, TilesAgreeWithTheScalarMatmul) {
  if (!detail::amx_cpu_has())
    GTEST_SKIP() << "this CPU lacks amx-int8 (compiled, not executed here): " << amx_status();
  if (!detail::amx_usable()) GTEST_SKIP() << "AMX not usable: " << amx_status();
  check_against_scalar(/*emulate=*/false);
  // The real tiles and their emulation: the same integers and the same
  // fused multiply-adds in the same order, so the same bits.
  std::mt19937 rng(5);
  const auto w = ref::random_weight(DType::Q4_1, 37, 576, rng);
  const auto x = random_x(33, 576, rng);
  std::vector<float> ye(33 * 37), yr(ye.size());
  detail::amx_matmul(w.view, x.data(), 33, ye.data(), nullptr, true);
  detail::amx_matmul(w.view, x.data(), 33, yr.data(), nullptr, false);
  for (size_t i = 0; i < ye.size(); ++i) ASSERT_EQ(yr[i], ye[i]) << i;
}

// A weight kept packed (amx_keep_packed) gives the bits of one packed on
// every call: the same WBlocks, the same tile products in the same order.
// Emulated on every machine; on the real tiles where the CPU has them.
TEST(AmxPacked, KeptWeightGivesTheSameBitsAsPackingPerCall) {
  std::mt19937 rng(7);
  ThreadPool pool(2);
  const bool real = detail::amx_cpu_has() && detail::amx_usable();
  for (DType t : kTypes) {
    const int64_t cols = 96;
    for (int64_t rows : {1, 16, 37}) {
      const auto w = ref::random_weight(t, rows, cols, rng);
      for (int64_t n : {4, 12, 33}) {
        const auto x = random_x(n, cols, rng);
        for (bool emulate : {true, false}) {
          if (!emulate && !real) continue;
          std::vector<float> per_call(size_t(n * rows)), kept(per_call.size(), NAN);
          detail::amx_matmul(w.view, x.data(), n, per_call.data(), &pool, emulate);
          ASSERT_TRUE(detail::amx_keep_packed(w.view, uint64_t(1) << 30));
          ASSERT_TRUE(detail::amx_has_packed(w.view));
          detail::amx_matmul(w.view, x.data(), n, kept.data(), &pool, emulate,
                             detail::amx_find_packed(w.view).get());
          detail::amx_drop_packed(w.view);
          EXPECT_FALSE(detail::amx_has_packed(w.view));
          for (size_t i = 0; i < kept.size(); ++i)
            ASSERT_EQ(kept[i], per_call[i]) << dtype_name(t) << " rows=" << rows << " n=" << n
                                            << " i=" << i << (emulate ? " emulated" : " real");
        }
      }
    }
  }
}

// The budget holds over every weight kept; a weight of another shape at a
// kept address is not taken for it; dropping frees the budget.
TEST(AmxPacked, BudgetAndIdentity) {
  std::mt19937 rng(8);
  const auto a = ref::random_weight(DType::Q8_0, 32, 64, rng);  // 2 strips x 2 blocks x 640 B
  const auto b = ref::random_weight(DType::Q8_0, 16, 64, rng);  // 1 strip x 2 blocks
  EXPECT_FALSE(detail::amx_keep_packed(a.view, 2559));
  EXPECT_TRUE(detail::amx_keep_packed(a.view, 2560));
  EXPECT_TRUE(detail::amx_keep_packed(a.view, 2560));  // already kept: counted, no more bytes
  EXPECT_FALSE(detail::amx_keep_packed(b.view, 2560 + 1279));
  TensorView other = a.view;  // same bytes, read as fewer rows: not the kept weight
  other.ne[1] = 16;
  EXPECT_FALSE(detail::amx_has_packed(other));
  EXPECT_FALSE(detail::amx_keep_packed(other, uint64_t(1) << 30));
  detail::amx_drop_packed(a.view);
  EXPECT_TRUE(detail::amx_has_packed(a.view));  // kept twice, dropped once
  detail::amx_drop_packed(a.view);
  EXPECT_FALSE(detail::amx_has_packed(a.view));
  EXPECT_TRUE(detail::amx_keep_packed(b.view, 1280));
  detail::amx_drop_packed(b.view);
  const auto q6 = ref::random_weight(DType::Q6_K, 16, 256, rng);
  EXPECT_FALSE(detail::amx_keep_packed(q6.view, uint64_t(1) << 30));
}

// kernels/cpu/matmul.h's keep_packed only where the tiles run the type.
TEST(AmxPacked, KeepPackedOnlyWhereTheTilesRun) {
  std::mt19937 rng(9);
  const auto w = ref::random_weight(DType::Q8_0, 32, 576, rng);
  const bool kept = keep_packed(w.view, uint64_t(1) << 30);
  if (!detail::amx_usable() || simd_level_forced()) {
    EXPECT_FALSE(kept);
  }
  EXPECT_EQ(kept, detail::amx_has_packed(w.view));
  if (kept) {
    EXPECT_TRUE(detail::kernel_amx(DType::Q8_0) || detail::kernel_amx_packed_rows(DType::Q8_0) > 0);
    // Through matmul at a row count the tiles take only for a kept weight.
    const int64_t n = std::max(detail::kernel_amx_packed_rows(DType::Q8_0), 4);
    const auto x = random_x(n, 576, rng);
    const auto want = ref::matmul(w.view, x.data(), n);
    std::vector<float> y(size_t(n * 32)), ys(y.size());
    matmul(w.view, x.data(), n, y.data(), nullptr);
    detail::matmul_at(w.view, x.data(), n, ys.data(), nullptr, SimdLevel::kScalar);
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_NEAR(y[i], ys[i], 1e-5 * want.abs_sum[i] + 1e-6) << i;
  }
  drop_packed(w.view);
  EXPECT_FALSE(detail::amx_has_packed(w.view));
}

TEST(Amx, StatusSaysWhatTheCpuHas) {
  const std::string s = amx_status();
  EXPECT_FALSE(s.empty());
  if (!detail::amx_cpu_has()) {
    EXPECT_NE(s.find("absent"), std::string::npos) << s;
  }
  std::printf("amx-int8: %s\n", s.c_str());
}

TEST(Amx, RefusesTypesWithoutAPath) {
  std::mt19937 rng(1);
  const auto w = ref::random_weight(DType::Q6_K, 4, 256, rng);
  std::vector<float> x(256, 1.f), y(4);
  EXPECT_FALSE(detail::amx_supports(DType::Q6_K));
  // The K-quants' activations are blocks of 256, not the tiles' 32.
  EXPECT_FALSE(detail::amx_supports(DType::Q4_K));
  EXPECT_FALSE(detail::amx_supports(DType::Q5_K));
  EXPECT_THROW(detail::amx_matmul(w.view, x.data(), 1, y.data(), nullptr, true), kvasir::Error);
}

}  // namespace
}  // namespace kvasir::cpu
