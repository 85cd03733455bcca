// The K-quant batch path (n >= 4 activation rows; from 8 rows at the
// 512-bit levels matmul_kquant_batch.cpp's kernel, else the 2 × 4 decode
// tiles) against n one-row decode calls, bit for bit — a row must get the
// same bits alone as in a batch (speculative decoding, prefix caching,
// recompute) — and against the double reference within test_matmul.cpp's
// K-quant tolerance (1.01 × the 8-bit activation bound, per 256 + 1e-5·Σ|w·x|
// + 1e-6). Shapes: weight rows not a multiple of the 4-row tile nor of the
// 16-row unpack block, batch sizes not a multiple of the 4-row tile, 1 to
// 9 super-blocks per row; every level this CPU has, on 1, 2 and 3 threads.
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

const DType kKTypes[] = {DType::Q4_K, DType::Q5_K, DType::Q6_K};

using testing::first_difference;
using testing::kUnwritten;
using testing::one_row_at_a_time;
using testing::range_error;
using testing::SimdGuard;

std::vector<float> random_x(int64_t n, int64_t cols, std::mt19937& rng) {
  return testing::quant_activations(n, cols, rng);
}

TEST(MatmulKQuantBatch, KernelAtThe512BitLevels) {
  for (DType t : kKTypes) {
    EXPECT_EQ(detail::kquant_batch_kernel(t, SimdLevel::kScalar), nullptr);
    EXPECT_EQ(detail::kquant_batch_kernel(t, SimdLevel::kAvx2), nullptr);
#if defined(__x86_64__)
    EXPECT_NE(detail::kquant_batch_kernel(t, SimdLevel::kAvx512), nullptr) << dtype_name(t);
    EXPECT_NE(detail::kquant_batch_kernel(t, SimdLevel::kAvx512Vnni), nullptr) << dtype_name(t);
#endif
  }
  EXPECT_EQ(detail::kquant_batch_kernel(DType::Q4_1, SimdLevel::kAvx512Vnni), nullptr);
}

TEST(MatmulKQuantBatch, EqualsDecodeBitForBitAndReference) {
  SimdGuard guard;
  std::mt19937 rng(4242);
  std::unique_ptr<ThreadPool> pools[] = {nullptr, std::make_unique<ThreadPool>(2),
                                         std::make_unique<ThreadPool>(3)};
  int ran = 0;
  for (int l = 0; l < kSimdLevels; ++l) {
    const auto level = SimdLevel(l);
    if (!simd_level_available(level)) continue;
    set_simd_level_for_testing(level);
    for (DType t : kKTypes)
      for (int64_t cols : {256, 768, 2304})
        for (int64_t rows : {1, 6, 19, 37}) {
          const auto w = ref::random_weight(t, rows, cols, rng);
          for (int64_t n : {4, 5, 7, 8, 16, 33}) {
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
                ASSERT_NEAR(y[k], want.y[k], 1.01 * want.qerr[k] + 1e-5 * want.abs_sum[k] + 1e-6)
                    << dtype_name(t) << " " << simd_level_name(level) << " rows=" << rows
                    << " cols=" << cols << " n=" << n;
              ++ran;
            }
          }
        }
  }
  EXPECT_GT(ran, 0);
}

// The kernel called directly on a sub-range of the weight rows (a thread's
// share, from an odd row, longer than one unpack block) writes those rows,
// with the decode bits, and nothing else.
TEST(MatmulKQuantBatch, SubRangeMatchesAndStaysInside) {
  SimdGuard guard;
  std::mt19937 rng(99);
  const int64_t rows = 53, cols = 512, n = 9, r0 = 3, r1 = 42;
  for (SimdLevel level : {SimdLevel::kAvx512, SimdLevel::kAvx512Vnni}) {
    if (!simd_level_available(level)) {
      std::printf("%s: this CPU lacks %s (compiled, not executed here)\n", simd_level_name(level),
                  simd_level_flags(level));
      continue;
    }
    set_simd_level_for_testing(level);
    for (DType t : kKTypes) {
      const auto w = ref::random_weight(t, rows, cols, rng);
      const auto x = random_x(n, cols, rng);
      const auto alone = one_row_at_a_time(w.view, x, n);
      const int64_t nb = cols / detail::kQK_K;
      std::vector<detail::BlockQ8K> xq(size_t(n * nb));
      for (int64_t j = 0; j < n; ++j)
        detail::quantize_row_q8k(x.data() + j * cols, cols, xq.data() + j * nb, level);
      std::vector<float> y(size_t(n * rows), kUnwritten);
      detail::kquant_batch_kernel(t, level)(static_cast<const uint8_t*>(w.view.data),
                                            int64_t(*dtype_row_bytes(t, cols)), r0, r1, xq.data(),
                                            n, cols, y.data(), rows);
      EXPECT_EQ(range_error(y, alone, n, rows, r0, r1), "") << dtype_name(t);
    }
  }
}

// The largest products the formats allow (every quant at its top, Q6_K's
// also at its bottom, every scale at its largest, activations at ±127
// after quantisation): the VNNI kernels hold a lane's 4 products in int16
// before scaling, so the bound is tested here.
TEST(MatmulKQuantBatch, LargestQuantsEqualDecode) {
  SimdGuard guard;
  std::mt19937 rng(7);
  const int64_t rows = 21, cols = 512, n = 9;
  for (int l = 0; l < kSimdLevels; ++l) {
    const auto level = SimdLevel(l);
    if (!simd_level_available(level)) continue;
    set_simd_level_for_testing(level);
    for (DType t : kKTypes) {
      auto w = ref::random_weight(t, rows, cols, rng);
      const int64_t bytes = dtype_info(t).bytes;
      for (size_t o = 0; o < w.bytes.size(); o += size_t(bytes)) {
        uint8_t* b = w.bytes.data() + o;
        if (t == DType::Q6_K) {
          // ql, qh: q = 63, and q = 0 every other super-block (the
          // VNNI kernel's q − 32 against x + 128 reaches ±32,640 there)
          std::memset(b, (o / size_t(bytes)) % 2 ? 0x00 : 0xff, 192);
          std::memset(b + 192, o % 2 ? 127 : 0x81, 16);  // scales ±127
        } else {
          std::memset(b + 4, 0xff, 12);  // scales and mins 63
          std::memset(b + 16, 0xff, size_t(bytes - 16));
        }
      }
      std::vector<float> x(size_t(n * cols));
      for (size_t k = 0; k < x.size(); ++k) x[k] = (k / 4) % 3 == 1 ? -1.f : 1.f;
      const auto alone = one_row_at_a_time(w.view, x, n);
      std::vector<float> y(size_t(n * rows), NAN);
      matmul(w.view, x.data(), n, y.data(), nullptr);
      const int64_t i = first_difference(y, alone);
      ASSERT_EQ(i, -1) << dtype_name(t) << " " << simd_level_name(level) << ": batch "
                       << y[size_t(i)] << " alone " << alone[size_t(i)];
    }
  }
}

}  // namespace
}  // namespace kvasir::cpu
