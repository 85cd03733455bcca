// The batch kernel of plain weights (F32, F16, BF16; n >= 4 activation rows,
// matmul_float.cpp batch_avx2) against the decode kernel, bit for bit: a
// row must get the same bits alone (speculative decoding, prefix caching
// and recompute rely on it) as in a batch of any size, whatever the thread
// split. Shapes: columns that are not multiples of 16 or 8 (the 8-column
// step and the scalar tail), weight rows that are not a multiple of the
// 2-row tile nor of the cache block, batch sizes that are not multiples of
// the 3-row tile. And against the double reference within the f32
// tolerance of test_matmul.cpp (|y - ref| <= 1e-5 * sum|w x| + 1e-6).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "batch_check.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/simd.h"
#include "reference.h"

namespace kvasir::cpu {
namespace {

const DType kPlain[] = {DType::F32, DType::F16, DType::BF16};

using testing::first_difference;
using testing::kUnwritten;
using testing::one_row_at_a_time;
using testing::range_error;
using testing::SimdGuard;

std::vector<float> random_x(int64_t n, int64_t cols, std::mt19937& rng) {
  std::vector<float> x(size_t(n * cols));  // [n, cols]
  std::normal_distribution<float> d(0.f, 1.f);
  for (auto& v : x) v = d(rng);
  return x;
}

TEST(MatmulBatch, PlainWeightsHaveABatchKernelFromAvx2) {
  for (DType t : kPlain) {
    EXPECT_EQ(detail::float_batch_kernel(t, SimdLevel::kScalar), nullptr);
    EXPECT_NE(detail::float_batch_kernel(t, SimdLevel::kAvx2), nullptr) << dtype_name(t);
  }
  EXPECT_EQ(detail::float_batch_kernel(DType::Q4_1, SimdLevel::kAvx2), nullptr);
}

// matmul with n rows (the batch kernel, on 1, 2 and 3 threads) equals n
// decode calls bit for bit, and the reference within tolerance.
TEST(MatmulBatch, EqualsDecodeKernelBitForBit) {
  SimdGuard guard;
  std::mt19937 rng(2024);
  std::unique_ptr<ThreadPool> pools[] = {nullptr, std::make_unique<ThreadPool>(2),
                                         std::make_unique<ThreadPool>(3)};
  for (int l = int(SimdLevel::kAvx2); l < kSimdLevels; ++l) {
    const auto level = SimdLevel(l);
    if (!simd_level_available(level)) continue;
    set_simd_level_for_testing(level);
    for (DType t : kPlain) {
      // Multiples of 16 (32, 576: the model's width) leave no 8-column
      // step and no tail: the 512-bit tiles' four-output sums.
      for (int64_t cols : {1, 7, 8, 15, 17, 24, 32, 33, 100, 576, 583}) {
        // 131 rows of 583 columns span more than one 128 KiB cache block.
        for (int64_t rows : {1, 2, 5, 37, 131}) {
          const auto w = ref::random_weight(t, rows, cols, rng);
          for (int64_t n : {4, 5, 7, 11, 12, 13, 14, 16, 17, 33}) {
            const auto x = random_x(n, cols, rng);
            const auto alone = one_row_at_a_time(w.view, x, n);
            const auto want = ref::matmul(w.view, x.data(), n);
            for (auto& pool : pools) {
              std::vector<float> y(size_t(n * rows), NAN);
              matmul(w.view, x.data(), n, y.data(), pool.get());
              const int64_t i = first_difference(y, alone);
              ASSERT_EQ(i, -1) << dtype_name(t) << " " << simd_level_name(level) << " rows=" << rows
                               << " cols=" << cols << " n=" << n
                               << " threads=" << (pool ? pool->size() : 0) << ": batch "
                               << y[size_t(i)] << " alone " << alone[size_t(i)];
              for (size_t k = 0; k < y.size(); ++k)
                ASSERT_NEAR(y[k], want.y[k], 1e-5 * want.abs_sum[k] + 1e-6)
                    << dtype_name(t) << " rows=" << rows << " cols=" << cols << " n=" << n;
            }
          }
        }
      }
    }
  }
}

// The batch kernel called directly on a sub-range of the weight rows (as a
// thread of the pool gets it, starting at an odd row) writes those rows,
// bit for bit as the decode kernel, and nothing else.
TEST(MatmulBatch, SubRangeMatchesAndStaysInside) {
  if (!simd_level_available(SimdLevel::kAvx2)) GTEST_SKIP() << "no avx2";
  SimdGuard guard;
  set_simd_level_for_testing(SimdLevel::kAvx2);
  std::mt19937 rng(77);
  const int64_t rows = 301, cols = 1001, n = 10, r0 = 3, r1 = 290;
  for (DType t : kPlain) {
    const auto w = ref::random_weight(t, rows, cols, rng);
    const auto x = random_x(n, cols, rng);
    const auto alone = one_row_at_a_time(w.view, x, n);
    const auto batch = detail::float_batch_kernel(t, SimdLevel::kAvx2);
    ASSERT_NE(batch, nullptr);
    std::vector<float> y(size_t(n * rows), kUnwritten);
    batch(static_cast<const uint8_t*>(w.view.data), int64_t(*dtype_row_bytes(t, cols)), r0, r1,
          x.data(), n, cols, y.data(), rows);
    EXPECT_EQ(range_error(y, alone, n, rows, r0, r1), "") << dtype_name(t);
  }
}

// Decode calls of 2 and 3 rows (the 2- and 3-row decode tiles) give the
// bits of the 1-row call too: a row's bits do not depend on the batch at all.
TEST(MatmulBatch, DecodeTilesAgreeWithOneRow) {
  SimdGuard guard;
  std::mt19937 rng(5);
  for (int l = int(SimdLevel::kAvx2); l < kSimdLevels; ++l) {
    if (!simd_level_available(SimdLevel(l))) continue;
    set_simd_level_for_testing(SimdLevel(l));
    for (DType t : kPlain)
      for (int64_t n : {2, 3}) {
        const auto w = ref::random_weight(t, 19, 203, rng);
        const auto x = random_x(n, 203, rng);
        std::vector<float> y(size_t(n * 19));
        matmul(w.view, x.data(), n, y.data(), nullptr);
        EXPECT_EQ(first_difference(y, one_row_at_a_time(w.view, x, n)), -1)
            << dtype_name(t) << " n=" << n;
      }
  }
}

// Quantised weights at 1..8 activation rows (a decode row and its
// speculative drafts; Q8_0 is the output head and takes the wide tile from 5
// rows on AVX-512) give every row the bits it gets alone, whatever the
// thread split: odd weight rows (the decode pairs' 1-row tail) and an odd
// number of blocks (the unpaired last block).
TEST(MatmulBatch, QuantRowsUpToEightAgreeWithOneRow) {
  SimdGuard guard;
  std::mt19937 rng(11);
  ThreadPool pool(2);
  for (int l = int(SimdLevel::kAvx2); l < kSimdLevels; ++l) {
    if (!simd_level_available(SimdLevel(l))) continue;
    set_simd_level_for_testing(SimdLevel(l));
    for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0})
      for (int64_t cols : {96, 640}) {
        const auto w = ref::random_weight(t, 75, cols, rng);
        for (int64_t n = 1; n <= 8; ++n) {
          const auto x = random_x(n, cols, rng);
          const auto want = one_row_at_a_time(w.view, x, n);
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::vector<float> y(size_t(n * 75));
            matmul(w.view, x.data(), n, y.data(), p);
            EXPECT_EQ(first_difference(y, want), -1) << simd_level_name(SimdLevel(l)) << " "
                                                     << dtype_name(t) << " cols=" << cols
                                                     << " n=" << n << (p ? " pool" : "");
          }
        }
      }
  }
}

}  // namespace
}  // namespace kvasir::cpu
