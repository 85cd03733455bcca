// Weights repacked 16 rows a block (kernels/cpu/rows16.h): the layout round
// trip, and the bits contract — every level, every number of activation
// rows, row ranges and threads give exactly the bits of the contract
// computed here from the original blocks (the formats' definitions), which
// are the AMX tiles' bits (amx_matmul, emulated) and within the 8-bit
// activation bound of the double reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "base/check.h"
#include "base/half.h"
#include "batch_check.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/rows16.h"
#include "reference.h"

namespace kvasir::cpu {
namespace {

using detail::BlockQ8x;
using testing::SimdGuard;

constexpr DType kTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0};

// The contract of rows16.h from the original blocks: per block the exact
// integer sum, fma(float(isum), d_w·d_x, acc), then (not Q8_0)
// fma(m_w, s_x, acc).
std::vector<float> contract(DType t, const uint8_t* w, int64_t rows, int64_t cols,
                            const std::vector<BlockQ8x>& xq, int64_t n) {
  const int64_t nb = cols / 32, bb = int64_t(dtype_info(t).bytes);
  std::vector<float> y(size_t(n * rows));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t r = 0; r < rows; ++r) {
      float acc = 0.f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = w + (r * nb + b) * bb;
        const BlockQ8x& xb = xq[size_t(j * nb + b)];
        const float d = fp16_to_f32(ref::get_u16(blk));
        const uint8_t* qs = blk + (t == DType::Q4_1 ? 4 : t == DType::Q5_0 ? 6 : 2);
        uint32_t qh = 0;
        if (t == DType::Q5_0) std::memcpy(&qh, blk + 2, 4);
        int32_t isum = 0;
        for (int e = 0; e < 32; ++e) {
          int32_t q = 0;
          if (t == DType::Q8_0)
            q = int8_t(qs[e]);
          else
            q = (e < 16 ? qs[e] & 0x0f : qs[e - 16] >> 4) | int32_t((qh >> e) & 1) << 4;
          isum += q * xb.q[e];
        }
        acc = std::fma(float(isum), d * xb.d, acc);
        if (t == DType::Q8_0) continue;
        const float m = t == DType::Q4_1   ? fp16_to_f32(ref::get_u16(blk + 2))
                        : t == DType::Q4_0 ? -8.f * d
                                           : -16.f * d;
        acc = std::fma(m, xb.s, acc);
      }
      y[size_t(j * rows + r)] = acc;
    }
  return y;
}

std::vector<BlockQ8x> quantised(const std::vector<float>& x, int64_t n, int64_t cols) {
  std::vector<BlockQ8x> xq(size_t(n * cols / 32));
  for (int64_t j = 0; j < n; ++j)
    detail::quantize_row_q8x(x.data() + j * cols, cols, xq.data() + j * cols / 32,
                             SimdLevel::kScalar);
  return xq;
}

// First index where the bits differ, or -1.
int64_t first_bits_difference(const float* a, const float* b, int64_t count) {
  return std::memcmp(a, b, size_t(count) * 4) == 0 ? -1 : [&] {
    for (int64_t i = 0; i < count; ++i)
      if (std::memcmp(a + i, b + i, 4) != 0) return i;
    return int64_t(-1);
  }();
}

TEST(Rows16, RepackKeepsTheSizeAndUnpacksToTheOriginal) {
  std::mt19937 rng(16);
  for (DType t : kTypes) {
    EXPECT_EQ(rows16_group_bytes(t), 16 * int64_t(dtype_info(t).bytes)) << dtype_name(t);
    const auto w = ref::random_weight(t, 48, 96, rng);
    const auto packed = repack16(t, w.bytes.data(), 48, 96);
    ASSERT_EQ(packed.size(), w.bytes.size()) << dtype_name(t);
    EXPECT_NE(packed, w.bytes) << dtype_name(t);
    EXPECT_EQ(unpack16(t, packed.data(), 48, 96), w.bytes) << dtype_name(t);
  }
  EXPECT_FALSE(rows16_supports(DType::Q8_0, 24, 64));
  EXPECT_FALSE(rows16_supports(DType::Q8_0, 32, 48));
  EXPECT_FALSE(rows16_supports(DType::Q4_K, 32, 256));
  EXPECT_FALSE(rows16_supports(DType::F32, 32, 64));
  const std::vector<uint8_t> bytes(24 * 34);
  EXPECT_THROW(repack16(DType::Q8_0, bytes.data(), 24, 32), Error);
}

// A row read back from the group blocks has dequantize_row's bits on the
// original (a tied embedding's lookup).
TEST(Rows16, DequantizedRowEqualsTheOriginals) {
  std::mt19937 rng(15);
  for (DType t : kTypes) {
    const int64_t rows = 48, cols = 160;
    const auto w = ref::random_weight(t, rows, cols, rng);
    const auto packed = repack16(t, w.bytes.data(), rows, cols);
    const Rows16View view{t, rows, cols, packed.data()};
    std::vector<float> got(static_cast<size_t>(cols)), want(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      rows16_dequantize_row(view, r, got.data());
      dequantize_row(w.view, r, want.data());
      ASSERT_EQ(first_bits_difference(got.data(), want.data(), cols), -1)
          << dtype_name(t) << " row " << r;
    }
    EXPECT_THROW(rows16_dequantize_row(view, rows, got.data()), Error);
  }
}

// Every level at every n against the contract, bit for bit; the scalar
// level (slow) at n = 1 and 33 and not on the largest shape. Block counts
// odd and even (1, 2, 3, 18, 48), weights of 1, 2 and 96 group blocks.
TEST(Rows16, EveryLevelGivesTheContractsBits) {
  SimdGuard guard;
  std::mt19937 rng(1616);
  int checked = 0;
  for (DType t : kTypes)
    for (int64_t rows : {16, 32, 1536})
      for (int64_t cols : {32, 64, 96, 576, 1536}) {
        const auto w = ref::random_weight(t, rows, cols, rng);
        const auto packed = repack16(t, w.bytes.data(), rows, cols);
        const Rows16View view{t, rows, cols, packed.data()};
        constexpr int64_t kN = 33;
        const auto x = testing::quant_activations(kN, cols, rng);
        const auto want = contract(t, w.bytes.data(), rows, cols, quantised(x, kN, cols), kN);
        for (int l = 0; l < kSimdLevels; ++l) {
          const auto level = SimdLevel(l);
          if (!simd_level_available(level)) continue;
          for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 33}) {
            if (level == SimdLevel::kScalar && (rows * cols > 1536 * 576 || (n != 1 && n != 33)))
              continue;
            std::vector<float> y(size_t(n * rows), NAN);
            detail::rows16_matmul_at(view, x.data(), n, y.data(), 0, rows, nullptr, level);
            const int64_t i = first_bits_difference(y.data(), want.data(), n * rows);
            ASSERT_EQ(i, -1) << dtype_name(t) << " " << simd_level_name(level) << " rows=" << rows
                             << " cols=" << cols << " n=" << n << ": " << y[size_t(i)] << " want "
                             << want[size_t(i)];
            ++checked;
          }
        }
      }
  EXPECT_GT(checked, 4 * 15 * 11);
}

// Every quant at its extreme (Q8_0 -128 and 127, nibbles 15, Q5_0 31)
// against activations at +-127: vpmaddubsw's pairs at their largest (2 x
// 128 x 127 for Q8_0 with the signs moved; the stored w + 128 would
// saturate there), at every level.
TEST(Rows16, ExtremeQuantsGiveTheContractsBits) {
  SimdGuard guard;
  const int64_t rows = 32, cols = 96, n = 3;
  std::vector<float> x(size_t(n * cols));
  for (int64_t k = 0; k < n * cols; ++k) x[size_t(k)] = (k / 7) % 2 ? 1.f : -1.f;
  for (DType t : kTypes) {
    const int64_t bb = int64_t(dtype_info(t).bytes);
    std::vector<uint8_t> w(size_t(rows * cols / 32 * bb), 0xff);
    for (size_t o = 0; t == DType::Q8_0 && o < w.size(); ++o) w[o] = o / 4 % 2 ? 0x7f : 0x80;
    for (size_t o = 0; o < w.size(); o += size_t(bb)) {
      ref::put_u16(&w[o], f32_to_fp16(0.01f));
      if (t == DType::Q4_1) ref::put_u16(&w[o + 2], f32_to_fp16(-0.1f));
    }
    const auto packed = repack16(t, w.data(), rows, cols);
    const auto want = contract(t, w.data(), rows, cols, quantised(x, n, cols), n);
    for (int l = 0; l < kSimdLevels; ++l) {
      const auto level = SimdLevel(l);
      if (!simd_level_available(level)) continue;
      std::vector<float> y(size_t(n * rows), NAN);
      detail::rows16_matmul_at({t, rows, cols, packed.data()}, x.data(), n, y.data(), 0, rows,
                               nullptr, level);
      ASSERT_EQ(first_bits_difference(y.data(), want.data(), n * rows), -1)
          << dtype_name(t) << " " << simd_level_name(level);
    }
  }
}

// The contract is a matmul: within test_matmul.cpp's 8-bit activation
// bound of the double reference.
TEST(Rows16, NearTheDoubleReference) {
  std::mt19937 rng(17);
  for (DType t : kTypes) {
    const int64_t rows = 64, cols = 576, n = 5;
    const auto w = ref::random_weight(t, rows, cols, rng);
    const auto packed = repack16(t, w.bytes.data(), rows, cols);
    const auto x = testing::quant_activations(n, cols, rng);
    std::vector<float> y(size_t(n * rows));
    rows16_matmul({t, rows, cols, packed.data()}, x.data(), n, y.data(), nullptr);
    const auto want = ref::matmul(w.view, x.data(), n);
    for (size_t k = 0; k < y.size(); ++k)
      ASSERT_NEAR(y[k], want.y[k], 1.01 * want.qerr[k] + 1e-5 * want.abs_sum[k] + 1e-6)
          << dtype_name(t) << " at " << k;
  }
}

// Q8_0, Q4_0, Q4_1: the AMX tiles' bits (their emulation on every machine,
// the real tiles where the CPU has them).
TEST(Rows16, EqualsTheAmxTilesBitForBit) {
  std::mt19937 rng(18);
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1}) {
    ASSERT_TRUE(detail::amx_supports(t));
    for (int64_t n : {1, 7, 20}) {
      const int64_t rows = 48, cols = 160;
      const auto w = ref::random_weight(t, rows, cols, rng);
      const auto packed = repack16(t, w.bytes.data(), rows, cols);
      const auto x = testing::quant_activations(n, cols, rng);
      std::vector<float> y(size_t(n * rows), NAN), tiles(size_t(n * rows), NAN);
      rows16_matmul({t, rows, cols, packed.data()}, x.data(), n, y.data(), nullptr);
      for (bool emulate : {true, false}) {
        if (!emulate && !detail::amx_usable()) continue;  // the real tiles where present
        detail::amx_matmul(w.view, x.data(), n, tiles.data(), nullptr, emulate);
        const int64_t i = first_bits_difference(y.data(), tiles.data(), n * rows);
        ASSERT_EQ(i, -1) << dtype_name(t) << " n=" << n << " emulated=" << emulate << ": "
                         << y[size_t(i)] << " tiles " << tiles[size_t(i)];
      }
    }
  }
}

// Row ranges on 16-row groups and 1 to 3 threads (the activations
// quantised on them too where n x cols >= 65536): the same bits, and
// nothing written outside the range.
TEST(Rows16, RangesAndThreadsGiveTheSameBits) {
  std::mt19937 rng(19);
  std::unique_ptr<ThreadPool> pools[] = {nullptr, std::make_unique<ThreadPool>(2),
                                         std::make_unique<ThreadPool>(3)};
  for (DType t : kTypes)
    for (auto [n, cols] : {std::pair<int64_t, int64_t>{11, 96}, {33, 2048}}) {  // 2nd: on threads
      const int64_t rows = 112;
      const auto w = ref::random_weight(t, rows, cols, rng);
      const auto packed = repack16(t, w.bytes.data(), rows, cols);
      const Rows16View view{t, rows, cols, packed.data()};
      const auto x = testing::quant_activations(n, cols, rng);
      std::vector<float> whole(size_t(n * rows));
      rows16_matmul(view, x.data(), n, whole.data(), nullptr);
      for (auto& pool : pools)
        for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 112}, {16, 64}, {48, 112}, {32, 48}}) {
          std::vector<float> y(size_t(n * rows), NAN);
          detail::rows16_matmul_at(view, x.data(), n, y.data(), r0, r1, pool.get(), simd_level());
          for (int64_t j = 0; j < n; ++j)
            for (int64_t r = 0; r < rows; ++r) {
              const float got = y[size_t(j * rows + r)], was = whole[size_t(j * rows + r)];
              if (r < r0 || r >= r1)
                ASSERT_TRUE(std::isnan(got)) << "wrote row " << r;
              else
                ASSERT_EQ(std::memcmp(&got, &was, 4), 0)
                    << dtype_name(t) << " n=" << n << " row " << r;
            }
        }
      EXPECT_THROW(
          detail::rows16_matmul_at(view, x.data(), n, whole.data(), 8, 24, nullptr, simd_level()),
          Error);
    }
}

// keep_rows16: matmul and matmul_group of a kept weight run rows16 at every
// row count (the bits of rows16_matmul on the repacked copy), a weight
// beside it that cannot be kept keeps its own family, a view of the same
// bytes with another shape is not taken for the kept one, and after the
// drop matmul is as before.
TEST(Rows16, KeptWeightRunsRows16AtEveryRowCount) {
  std::mt19937 rng(20);
  ThreadPool pool(2);
  const int64_t cols = 2048;  // large enough for the pool at n >= 2
  const auto q = ref::random_weight(DType::Q4_1, 64, cols, rng);
  const auto k = ref::random_weight(DType::Q8_0, 32, cols, rng);
  const auto odd = ref::random_weight(DType::Q4_1, 24, cols, rng);  // 24 rows: not kept
  TensorView half = q.view;                                         // q's bytes, 32 rows
  half.ne[1] = 32;
  const auto pq = repack16(DType::Q4_1, q.bytes.data(), 64, cols);
  const auto pk = repack16(DType::Q8_0, k.bytes.data(), 32, cols);
  for (int64_t n : {1, 3, 4, 8, 17, 33}) {
    const auto x = testing::quant_activations(n, cols, rng);
    auto run = [&](const TensorView& w) {
      std::vector<float> y(size_t(n * w.rows()));
      matmul(w, x.data(), n, y.data(), &pool);
      return y;
    };
    auto want16 = [&](DType t, const std::vector<uint8_t>& packed, int64_t rows) {
      std::vector<float> y(size_t(n * rows));
      rows16_matmul({t, rows, cols, packed.data()}, x.data(), n, y.data(), nullptr);
      return y;
    };
    const auto q_old = run(q.view), odd_old = run(odd.view), half_old = run(half);
    const auto q16 = want16(DType::Q4_1, pq, 64), k16 = want16(DType::Q8_0, pk, 32);
    ASSERT_TRUE(keep_rows16(q.view));
    ASSERT_TRUE(keep_rows16(k.view));
    EXPECT_FALSE(keep_rows16(odd.view));
    EXPECT_FALSE(keep_rows16(half));
    EXPECT_EQ(first_bits_difference(run(q.view).data(), q16.data(), n * 64), -1) << "n=" << n;
    EXPECT_EQ(first_bits_difference(run(half).data(), half_old.data(), n * 32), -1) << "n=" << n;
    std::vector<float> yq(q16.size()), yk(k16.size()), yo(odd_old.size());
    const MatmulOut both[] = {{&q.view, yq.data()}, {&k.view, yk.data()}};
    matmul_group(both, 2, x.data(), n, &pool);
    EXPECT_EQ(first_bits_difference(yq.data(), q16.data(), n * 64), -1) << "n=" << n;
    EXPECT_EQ(first_bits_difference(yk.data(), k16.data(), n * 32), -1) << "n=" << n;
    const MatmulOut mixed[] = {{&odd.view, yo.data()}, {&q.view, yq.data()}};
    std::fill(yq.begin(), yq.end(), NAN);
    matmul_group(mixed, 2, x.data(), n, &pool);
    EXPECT_EQ(first_bits_difference(yq.data(), q16.data(), n * 64), -1) << "n=" << n;
    EXPECT_EQ(first_bits_difference(yo.data(), odd_old.data(), n * 24), -1) << "n=" << n;
    drop_rows16(q.view);
    drop_rows16(k.view);
    EXPECT_EQ(first_bits_difference(run(q.view).data(), q_old.data(), n * 64), -1) << "n=" << n;
  }
}

}  // namespace
}  // namespace kvasir::cpu
