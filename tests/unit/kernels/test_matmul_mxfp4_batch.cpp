// The MXFP4 batch path (n >= 4 activation rows; matmul_mxfp4.cpp's batch
// kernel at every x86 level, the decode tiles at scalar) against n one-row
// decode calls, bit for bit — a row must get the same bits alone as in a
// batch — against the scalar path and against the double reference within
// test_matmul.cpp's 8-bit activation bound (1.01 × Σ_blocks Σ|w|·amax/254
// + 1e-5·Σ|w·x| + 1e-6). Shapes: odd block counts (1, 3, 91), weight rows
// not a multiple of the 4-row tile nor of the 16-row unpack block, 4 to 33
// activation rows; every level this CPU has, on 1, 2 and 3 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
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

using testing::first_difference;
using testing::kUnwritten;
using testing::one_row_at_a_time;
using testing::range_error;
using testing::SimdGuard;

std::vector<float> random_x(int64_t n, int64_t cols, std::mt19937& rng) {
  return testing::quant_activations(n, cols, rng);
}

TEST(MatmulMxfp4Batch, KernelAtEveryX86Level) {
  EXPECT_EQ(detail::mxfp4_batch_kernel(SimdLevel::kScalar), nullptr);
#if defined(__x86_64__)
  EXPECT_NE(detail::mxfp4_batch_kernel(SimdLevel::kAvx2), nullptr);
  EXPECT_NE(detail::mxfp4_batch_kernel(SimdLevel::kAvxVnni), nullptr);
  EXPECT_NE(detail::mxfp4_batch_kernel(SimdLevel::kAvx2),
            detail::mxfp4_batch_kernel(SimdLevel::kAvxVnni));
  EXPECT_NE(detail::mxfp4_batch_kernel(SimdLevel::kAvx512), nullptr);
  EXPECT_NE(detail::mxfp4_batch_kernel(SimdLevel::kAvx512Vnni), nullptr);
  EXPECT_NE(detail::mxfp4_batch_kernel(SimdLevel::kAvx512),
            detail::mxfp4_batch_kernel(SimdLevel::kAvx512Vnni));
#endif
}

TEST(MatmulMxfp4Batch, EqualsDecodeBitForBitScalarAndReference) {
  SimdGuard guard;
  std::mt19937 rng(4243);
  std::unique_ptr<ThreadPool> pools[] = {nullptr, std::make_unique<ThreadPool>(2),
                                         std::make_unique<ThreadPool>(3)};
  int ran = 0;
  for (int l = 0; l < kSimdLevels; ++l) {
    const auto level = SimdLevel(l);
    if (!simd_level_available(level)) continue;
    for (int64_t cols : {32, 96, 2912})
      for (int64_t rows : {1, 6, 19, 37}) {
        const auto w = ref::random_weight(DType::MXFP4, rows, cols, rng);
        for (int64_t n : {4, 5, 7, 8, 16, 33}) {
          const auto x = random_x(n, cols, rng);
          set_simd_level_for_testing(SimdLevel::kScalar);
          std::vector<float> scalar(size_t(n * rows));
          matmul(w.view, x.data(), n, scalar.data(), nullptr);
          set_simd_level_for_testing(level);
          const auto alone = one_row_at_a_time(w.view, x, n);
          const auto want = ref::matmul(w.view, x.data(), n);
          for (auto& pool : pools) {
            std::vector<float> y(size_t(n * rows), NAN);
            matmul(w.view, x.data(), n, y.data(), pool.get());
            const int64_t i = first_difference(y, alone);
            ASSERT_EQ(i, -1) << simd_level_name(level) << " rows=" << rows << " cols=" << cols
                             << " n=" << n << " threads=" << (pool ? pool->size() : 0) << ": batch "
                             << y[size_t(i)] << " alone " << alone[size_t(i)];
            for (size_t k = 0; k < y.size(); ++k) {
              ASSERT_NEAR(y[k], want.y[k], 1.01 * want.qerr[k] + 1e-5 * want.abs_sum[k] + 1e-6)
                  << simd_level_name(level) << " rows=" << rows << " cols=" << cols << " n=" << n;
              ASSERT_NEAR(y[k], scalar[k], 1e-5 * want.abs_sum[k] + 1e-6)
                  << simd_level_name(level) << " vs scalar, rows=" << rows << " cols=" << cols
                  << " n=" << n;
            }
            ++ran;
          }
        }
      }
  }
  EXPECT_GT(ran, 0);
}

// The kernel called directly on a sub-range of the weight rows (a thread's
// share, from an odd row, longer than one unpack block) writes those rows,
// with the decode bits, and nothing else, at every x86 level (the integer
// lane sums do not depend on the instruction: vpdpbusd or vpmaddubsw).
TEST(MatmulMxfp4Batch, SubRangeMatchesAndStaysInside) {
  SimdGuard guard;
  std::mt19937 rng(98);
  const int64_t rows = 53, cols = 2912, n = 9, r0 = 3, r1 = 42, nb = cols / detail::kQK;
  const auto w = ref::random_weight(DType::MXFP4, rows, cols, rng);
  const auto x = random_x(n, cols, rng);
  for (SimdLevel level :
       {SimdLevel::kAvx2, SimdLevel::kAvxVnni, SimdLevel::kAvx512, SimdLevel::kAvx512Vnni}) {
    if (!simd_level_available(level)) {
      std::printf("%s: this CPU lacks %s (compiled, not executed here)\n", simd_level_name(level),
                  simd_level_flags(level));
      continue;
    }
    set_simd_level_for_testing(level);
    const auto alone = one_row_at_a_time(w.view, x, n);
    std::vector<detail::BlockQ8x> xq(size_t(n * nb));
    for (int64_t j = 0; j < n; ++j)
      detail::quantize_row_q8x(x.data() + j * cols, cols, xq.data() + j * nb, level);
    std::vector<float> y(size_t(n * rows), kUnwritten);
    detail::mxfp4_batch_kernel(level)(static_cast<const uint8_t*>(w.view.data),
                                      int64_t(*dtype_row_bytes(DType::MXFP4, cols)), r0, r1,
                                      xq.data(), n, cols, y.data(), rows);
    EXPECT_EQ(range_error(y, alone, n, rows, r0, r1), "") << simd_level_name(level);
  }
}

// The largest products the format allows: every code ±12 (±6 doubled),
// activations at ±127 after quantisation, and the smallest and largest
// scales. The lane sums with the +128 offset stay far inside int16/int32.
TEST(MatmulMxfp4Batch, LargestCodesEqualDecode) {
  SimdGuard guard;
  std::mt19937 rng(8);
  const int64_t rows = 21, cols = 96, n = 9;
  for (int l = 0; l < kSimdLevels; ++l) {
    const auto level = SimdLevel(l);
    if (!simd_level_available(level)) continue;
    set_simd_level_for_testing(level);
    auto w = ref::random_weight(DType::MXFP4, rows, cols, rng);
    for (size_t o = 0; o < w.bytes.size(); o += 17) {
      w.bytes[o] = (o / 17) % 3 == 0 ? 1 : (o / 17) % 3 == 1 ? 127 : 140;
      for (size_t i = 1; i < 17; ++i) w.bytes[o + i] = (o / 17) % 2 ? 0x77 : 0xff;
    }
    std::vector<float> x(size_t(n * cols));
    for (size_t i = 0; i < x.size(); ++i) x[i] = i % 3 == 0 ? -1.f : 1.f;
    const auto alone = one_row_at_a_time(w.view, x, n);
    std::vector<float> y(size_t(n * rows), NAN);
    matmul(w.view, x.data(), n, y.data(), nullptr);
    const int64_t i = first_difference(y, alone);
    ASSERT_EQ(i, -1) << simd_level_name(level) << ": batch " << y[size_t(i)] << " alone "
                     << alone[size_t(i)];
  }
}

}  // namespace
}  // namespace kvasir::cpu
