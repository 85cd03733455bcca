// matmul and dequantize_row against reference.h.
//
// Tolerances (per output y[j, r], with A = Σ|w·x| over the row):
//  - F32/F16/BF16 weights: |y - ref| ≤ 1e-5·A + 1e-6 (f32 accumulation).
//  - Q8_0/Q4_0/Q4_1/Q5_0/MXFP4: the activations are rounded to 8 bits per block of 32
//    (d = amax/127, |x - d·q| ≤ d/2), so |y - ref| ≤ Σ_blocks Σ|w|·amax/254;
//    we allow 1.01 × that bound + 1e-5·A + 1e-6. ref uses the dequantised
//    weights and the f32 activations, in double.
//    The K-quants (Q4_K, Q5_K, Q6_K) quantise activations per 256 (BlockQ8K,
//    llama.cpp's Q8_K): the same bound with amax taken per 256 (reference.h).
//  - every SIMD level vs scalar: the integer block sums are identical, only
//    the f32 summation order differs: |y_level - y_scalar| ≤ 1e-5·A + 1e-6.
//    The K-quants do the same f32 operations in the same order at every
//    level: the scalar bits exactly. Levels the CPU lacks are skipped,
//    naming the missing flags.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "base/check.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/simd.h"
#include "reference.h"

namespace kvasir::cpu {
namespace {

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                        DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::MXFP4};
const DType kKTypes[] = {DType::Q4_K, DType::Q5_K, DType::Q6_K};

bool is_kquant(DType t) {
  return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
}
bool is_quant(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 ||
         t == DType::MXFP4 || is_kquant(t);
}

std::vector<float> random_x(int64_t n, int64_t cols, std::mt19937& rng, bool edge_cases = true) {
  std::vector<float> x(static_cast<size_t>(n * cols));
  std::normal_distribution<float> d(0.f, 1.f);
  for (auto& v : x) v = d(rng);
  // An all-zero block and an outlier exercise d == 0 and wide ranges.
  if (edge_cases && cols >= 64) {
    for (int i = 0; i < 32; ++i) x[size_t(32 + i)] = 0.f;
    x[0] = 40.f;
  }
  return x;
}

struct SimdGuard {
  ~SimdGuard() { simd_reset_for_testing(); }  // back to the start-up mode
};

// Every level this CPU can run (the others are covered, or skipped with the
// missing flags named, by EveryLevel below).
std::vector<SimdLevel> levels() {
  std::vector<SimdLevel> l;
  for (int i = 0; i < kSimdLevels; ++i)
    if (simd_level_available(SimdLevel(i))) l.push_back(SimdLevel(i));
  return l;
}

void sweep(const std::vector<DType>& types, const std::vector<int64_t>& col_list, uint32_t seed) {
  SimdGuard guard;
  std::mt19937 rng(seed);
  std::unique_ptr<ThreadPool> pools[] = {nullptr, std::make_unique<ThreadPool>(2),
                                         std::make_unique<ThreadPool>(3)};
  for (DType t : types) {
    for (int64_t cols : col_list) {
      for (int64_t rows : {1, 5, 64, 193}) {
        const auto w = ref::random_weight(t, rows, cols, rng);
        for (int64_t n : {1, 2, 3, 7, 16, 33}) {
          const auto x = random_x(n, cols, rng);
          const auto want = ref::matmul(w.view, x.data(), n);
          for (SimdLevel level : levels()) {
            set_simd_level_for_testing(level);
            for (auto& pool : pools) {
              std::vector<float> y(size_t(n * rows), NAN);
              matmul(w.view, x.data(), n, y.data(), pool.get());
              int bad = 0;
              for (size_t i = 0; i < y.size(); ++i) {
                double tol = 1e-5 * want.abs_sum[i] + 1e-6;
                if (is_quant(t)) tol += 1.01 * want.qerr[i];
                if (!std::isfinite(y[i]) || std::fabs(y[i] - want.y[i]) > tol) {
                  if (++bad <= 3)
                    ADD_FAILURE() << dtype_name(t) << " n=" << n << " rows=" << rows
                                  << " cols=" << cols << " " << simd_level_name(level)
                                  << " threads=" << (pool ? pool->size() : 0) << " i=" << i
                                  << ": got " << y[i] << " want " << want.y[i] << " tol " << tol;
                }
              }
              ASSERT_EQ(bad, 0);
            }
          }
        }
      }
    }
  }
}

TEST(Matmul, SweepAgainstReference) {
  sweep({std::begin(kTypes), std::end(kTypes)}, {32, 96, 576}, 1234);
}

TEST(Matmul, KQuantSweepAgainstReference) {
  sweep({std::begin(kKTypes), std::end(kKTypes)}, {256, 768}, 4321);
}

TEST(Matmul, QuantisedErrorIsSmallRelativeToNorm) {
  // Overall, for Gaussian activations: ‖y - ref‖ / ‖ref‖ < 1% at the model's
  // shapes (the random Q4_1 minimums make this a harsh case).
  std::mt19937 rng(7);
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::MXFP4, DType::Q4_K,
                  DType::Q5_K, DType::Q6_K}) {
    const auto w = ref::random_weight(t, 192, is_kquant(t) ? 512 : 576, rng);
    const auto x = random_x(4, w.view.cols(), rng, /*edge_cases=*/false);
    const auto want = ref::matmul(w.view, x.data(), 4);
    std::vector<float> y(4 * 192);
    matmul(w.view, x.data(), 4, y.data(), nullptr);
    double num = 0, den = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      num += (y[i] - want.y[i]) * (y[i] - want.y[i]);
      den += want.y[i] * want.y[i];
    }
    EXPECT_LT(std::sqrt(num / den), 1e-2) << dtype_name(t);
    std::printf("%s relative error %.5f\n", dtype_name(t), std::sqrt(num / den));
  }
}

// Each SIMD level against the scalar path, one test per level: a level the
// CPU cannot run is skipped with the flags it lacks.
class EveryLevel : public ::testing::TestWithParam<int> {};

TEST_P(EveryLevel, AgreesTightlyWithScalar) {
  const auto level = SimdLevel(GetParam());
  if (!simd_level_available(level))
    GTEST_SKIP() << simd_level_name(level) << ": this CPU lacks " << simd_level_flags(level)
                 << " (compiled, not executed here)";
  SimdGuard guard;
  std::mt19937 rng(99);
  std::vector<DType> all(std::begin(kTypes), std::end(kTypes));
  all.insert(all.end(), std::begin(kKTypes), std::end(kKTypes));
  for (DType t : all) {
    for (int64_t n : {1, 2, 3, 5, 16}) {
      // Odd block counts (a lone last block for the 512-bit pairs) and odd rows.
      for (int64_t cols :
           is_kquant(t) ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{32, 96, 576}) {
        const int64_t rows = 37;
        const auto w = ref::random_weight(t, rows, cols, rng);
        const auto x = random_x(n, cols, rng);
        const auto want = ref::matmul(w.view, x.data(), n);
        std::vector<float> ys(size_t(n * rows)), yl(size_t(n * rows));
        set_simd_level_for_testing(SimdLevel::kScalar);
        matmul(w.view, x.data(), n, ys.data(), nullptr);
        set_simd_level_for_testing(level);
        ASSERT_EQ(simd_level(), level);
        matmul(w.view, x.data(), n, yl.data(), nullptr);
        for (size_t i = 0; i < ys.size(); ++i)
          ASSERT_NEAR(yl[i], ys[i], 1e-5 * want.abs_sum[i] + 1e-6)
              << dtype_name(t) << " n=" << n << " cols=" << cols << " " << simd_level_name(level);
      }
    }
  }
}

// The K-quants at every level this CPU has (256- and 512-bit tiles, the
// batch kernel from 8 rows) give the scalar path's bits: the same int32
// lanes per super-block and the same f32 operations (matmul_kquant.cpp).
TEST(Matmul, KQuantLevelsGiveTheScalarBits) {
  SimdGuard guard;
  std::mt19937 rng(77);
  for (DType t : kKTypes)
    for (int64_t cols : {256, 768, 2304})
      for (int64_t n : {1, 2, 3, 5, 8, 16}) {
        const int64_t rows = 37;
        const auto w = ref::random_weight(t, rows, cols, rng);
        const auto x = random_x(n, cols, rng);
        std::vector<float> ys(size_t(n * rows), NAN);
        set_simd_level_for_testing(SimdLevel::kScalar);
        matmul(w.view, x.data(), n, ys.data(), nullptr);
        for (SimdLevel level : levels()) {
          set_simd_level_for_testing(level);
          std::vector<float> yl(ys.size(), NAN);
          matmul(w.view, x.data(), n, yl.data(), nullptr);
          for (size_t i = 0; i < ys.size(); ++i)
            ASSERT_EQ(0, std::memcmp(&yl[i], &ys[i], sizeof(float)))
                << dtype_name(t) << " n=" << n << " cols=" << cols << " "
                << simd_level_name(level) << " i=" << i << ": " << yl[i] << " vs " << ys[i];
        }
      }
}

// Decode over rows long enough for four weight streams (decode_rows): odd
// row counts leave runs of 4, 2 and 1 rows; with a pool each thread's
// range is split again. Same bits as the scalar path at every level.
TEST(Matmul, KQuantFourStreamDecodeGivesTheScalarBits) {
  SimdGuard guard;
  std::mt19937 rng(78);
  ThreadPool pool(3);
  const int64_t cols = 12288;  // matmul_internal.h: kFourStreamCols
  for (DType t : kKTypes)
    for (int64_t rows : {1, 3, 6, 7, 37, 67})
      for (int64_t n : {1, 2, 3}) {
        const auto w = ref::random_weight(t, rows, cols, rng);
        const auto x = random_x(n, cols, rng);
        std::vector<float> ys(size_t(n * rows), NAN);
        set_simd_level_for_testing(SimdLevel::kScalar);
        matmul(w.view, x.data(), n, ys.data(), nullptr);
        for (SimdLevel level : levels())
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            set_simd_level_for_testing(level);
            std::vector<float> yl(ys.size(), NAN);
            matmul(w.view, x.data(), n, yl.data(), p);
            ASSERT_EQ(0, std::memcmp(yl.data(), ys.data(), ys.size() * sizeof(float)))
                << dtype_name(t) << " rows=" << rows << " n=" << n << " "
                << simd_level_name(level) << (p ? " pool" : "");
          }
      }
}

INSTANTIATE_TEST_SUITE_P(Levels, EveryLevel, ::testing::Range(1, kSimdLevels),
                         [](const auto& info) { return simd_level_name(SimdLevel(info.param)); });

TEST(Matmul, OddColumnsForPlainTypes) {
  std::mt19937 rng(3);
  SimdGuard guard;
  for (SimdLevel level : levels()) {
    set_simd_level_for_testing(level);
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
      for (int64_t cols : {1, 7, 17, 33}) {
        const auto w = ref::random_weight(t, 9, cols, rng);
        const auto x = random_x(5, cols, rng);
        const auto want = ref::matmul(w.view, x.data(), 5);
        std::vector<float> y(5 * 9);
        matmul(w.view, x.data(), 5, y.data(), nullptr);
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_NEAR(y[i], want.y[i], 1e-5 * want.abs_sum[i] + 1e-6);
      }
    }
  }
}

TEST(Matmul, RejectsBadInput) {
  std::mt19937 rng(5);
  auto w = ref::random_weight(DType::Q4_1, 4, 64, rng);
  std::vector<float> x(64), y(4);
  TensorView bad = w.view;
  bad.ne[0] = 48;  // not a multiple of 32
  EXPECT_THROW(matmul(bad, x.data(), 1, y.data(), nullptr), kvasir::Error);
  bad = w.view;
  bad.type = DType::Q5_0;
  EXPECT_THROW(matmul(bad, x.data(), 1, y.data(), nullptr), kvasir::Error);
  bad = w.view;
  bad.nbytes -= 1;  // smaller than its shape
  EXPECT_THROW(matmul(bad, x.data(), 1, y.data(), nullptr), kvasir::Error);
  EXPECT_THROW(matmul(w.view, x.data(), -1, y.data(), nullptr), kvasir::Error);
  EXPECT_NO_THROW(matmul(w.view, x.data(), 0, y.data(), nullptr));
}

// matmul_group: the products of one input in one parallel call give exactly
// what separate matmul calls give, whatever the thread count splits.
TEST(MatmulGroup, EqualsSeparateCallsBitForBit) {
  std::mt19937 rng(11);
  std::unique_ptr<ThreadPool> pools[] = {nullptr, std::make_unique<ThreadPool>(2),
                                         std::make_unique<ThreadPool>(3)};
  std::vector<std::vector<DType>> groups;
  for (DType t : kTypes) groups.push_back({t, t, t});
  for (DType t : kKTypes) groups.push_back({t, t});
  groups.push_back({DType::Q4_1, DType::Q8_0, DType::F32});  // no common kernel input: separate
  for (const auto& types : groups) {
    const int64_t cols = is_kquant(types[0]) ? 256 : 96;
    const int64_t rows[] = {64, 5, 193};
    std::vector<ref::OwnedWeight> ws;
    for (size_t i = 0; i < types.size(); ++i)
      ws.push_back(ref::random_weight(types[i], rows[i], cols, rng));
    for (int64_t n : {1, 2, 5, 16, 33}) {
      const auto x = random_x(n, cols, rng);
      for (auto& pool : pools) {
        std::vector<std::vector<float>> want, got;
        std::vector<MatmulOut> outs;
        for (size_t i = 0; i < ws.size(); ++i) {
          want.emplace_back(size_t(n * rows[i]), NAN);
          got.emplace_back(size_t(n * rows[i]), NAN);
          matmul(ws[i].view, x.data(), n, want.back().data(), pool.get());
        }
        for (size_t i = 0; i < ws.size(); ++i) outs.push_back({&ws[i].view, got[i].data()});
        matmul_group(outs.data(), int(outs.size()), x.data(), n, pool.get());
        for (size_t i = 0; i < ws.size(); ++i)
          ASSERT_EQ(0, std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(float)))
              << dtype_name(types[i]) << " product " << i << " n=" << n
              << " threads=" << (pool ? pool->size() : 0);
      }
    }
  }
}

TEST(MatmulGroup, RejectsProductsOfOtherWidths) {
  std::mt19937 rng(12);
  auto a = ref::random_weight(DType::Q4_1, 8, 64, rng),
       b = ref::random_weight(DType::Q4_1, 8, 96, rng);
  std::vector<float> x(96), ya(8), yb(8);
  const MatmulOut outs[] = {{&a.view, ya.data()}, {&b.view, yb.data()}};
  EXPECT_THROW(matmul_group(outs, 2, x.data(), 1, nullptr), kvasir::Error);
  const MatmulOut none[] = {{nullptr, ya.data()}};
  EXPECT_THROW(matmul_group(none, 1, x.data(), 1, nullptr), kvasir::Error);
  // Checked whether or not the group runs as one call: a float weight first
  // (no common kernel input with Q4_1), then a missing one.
  auto f = ref::random_weight(DType::F32, 8, 64, rng);
  const MatmulOut mixed[] = {{&f.view, ya.data()}, {&a.view, yb.data()}, {nullptr, yb.data()}};
  EXPECT_THROW(matmul_group(mixed, 3, x.data(), 1, nullptr), kvasir::Error);
  std::vector<MatmulOut> many(9, MatmulOut{&a.view, ya.data()});  // past the 8 fused at once
  many.back().w = nullptr;
  EXPECT_THROW(matmul_group(many.data(), 9, x.data(), 1, nullptr), kvasir::Error);
  EXPECT_THROW(matmul_group(outs, -1, x.data(), 1, nullptr), kvasir::Error);
  EXPECT_NO_THROW(matmul_group(outs, 0, x.data(), 1, nullptr));
}

TEST(DequantizeRow, MatchesReferenceForEveryType) {
  std::mt19937 rng(11);
  std::vector<DType> all(std::begin(kTypes), std::end(kTypes));
  all.insert(all.end(), std::begin(kKTypes), std::end(kKTypes));
  for (DType t : all) {
    const int64_t cols = is_kquant(t) ? 512 : 96;
    const auto w = ref::random_weight(t, 6, cols, rng);
    std::vector<float> out(static_cast<size_t>(cols));
    for (int64_t r = 0; r < 6; ++r) {
      dequantize_row(w.view, r, out.data());
      const auto want = ref::dequant_row(w.view, r);
      for (size_t c = 0; c < out.size(); ++c) ASSERT_EQ(out[c], want[c]) << dtype_name(t);
    }
    EXPECT_THROW(dequantize_row(w.view, 6, out.data()), kvasir::Error);
    EXPECT_THROW(dequantize_row(w.view, -1, out.data()), kvasir::Error);
  }
}

TEST(DequantizeRow, KnownQ5_0Block) {
  // d = 0.25; weight j's fifth bit is bit j of qh (set for odd j), its low
  // four bits nibble j % 16 (low nibble for j < 16): q = nib | hb << 4.
  std::vector<uint8_t> blk(22);
  ref::put_u16(blk.data(), f32_to_fp16(0.25f));
  const uint32_t qh = 0xaaaaaaaau;
  std::memcpy(blk.data() + 2, &qh, 4);
  for (int j = 0; j < 16; ++j) blk[size_t(6 + j)] = uint8_t((15 - j) << 4 | j);
  TensorView w;
  w.type = DType::Q5_0;
  w.n_dims = 2;
  w.ne[0] = 32;
  w.ne[1] = 1;
  w.data = blk.data();
  w.nbytes = blk.size();
  std::vector<float> out(32);
  dequantize_row(w, 0, out.data());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[size_t(j)], 0.25f * float((j | (j & 1) << 4) - 16)) << j;
    EXPECT_EQ(out[size_t(j + 16)], 0.25f * float(((15 - j) | (j & 1) << 4) - 16)) << j + 16;
  }
}

TEST(DequantizeRow, KnownMxfp4Blocks) {
  // Block 0: E8M0 128 (scale 2); block 1: E8M0 1 (2^-126, its half a
  // subnormal). Byte j holds code j (weight j) and code 15 - j (weight j + 16).
  const float e2m1[16] = {0, .5f, 1, 1.5f, 2, 3, 4, 6, -0.f, -.5f, -1, -1.5f, -2, -3, -4, -6};
  std::vector<uint8_t> blk(34);
  blk[0] = 128;
  blk[17] = 1;
  for (int j = 0; j < 16; ++j)
    blk[size_t(1 + j)] = blk[size_t(18 + j)] = uint8_t((15 - j) << 4 | j);
  TensorView w;
  w.type = DType::MXFP4;
  w.n_dims = 2;
  w.ne[0] = 64;
  w.ne[1] = 1;
  w.data = blk.data();
  w.nbytes = blk.size();
  std::vector<float> out(64);
  dequantize_row(w, 0, out.data());
  const float tiny = std::ldexp(1.f, -126);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[size_t(j)], 2.f * e2m1[j]) << j;
    EXPECT_EQ(out[size_t(j + 16)], 2.f * e2m1[15 - j]) << j + 16;
    EXPECT_EQ(out[size_t(j + 32)], tiny * e2m1[j]) << j + 32;
    EXPECT_EQ(out[size_t(j + 48)], tiny * e2m1[15 - j]) << j + 48;
  }
  w.nbytes = 33;  // a block short of its shape
  std::vector<float> y(1);
  const std::vector<float> x(64, 1.f);
  EXPECT_THROW(matmul(w, x.data(), 1, y.data(), nullptr), kvasir::Error);
  w.ne[0] = 48;  // not a whole number of blocks
  w.nbytes = 34;
  EXPECT_THROW(matmul(w, x.data(), 1, y.data(), nullptr), kvasir::Error);
}

TEST(DequantizeRow, KnownQ4_1Block) {
  // d = 0.5, m = -1: byte j = (j+16 weight in the high nibble, j in the low).
  std::vector<uint8_t> blk(20);
  ref::put_u16(blk.data(), f32_to_fp16(0.5f));
  ref::put_u16(blk.data() + 2, f32_to_fp16(-1.f));
  for (int j = 0; j < 16; ++j) blk[size_t(4 + j)] = uint8_t((15 - j) << 4 | j);
  TensorView w;
  w.type = DType::Q4_1;
  w.n_dims = 2;
  w.ne[0] = 32;
  w.ne[1] = 1;
  w.data = blk.data();
  w.nbytes = blk.size();
  std::vector<float> out(32);
  dequantize_row(w, 0, out.data());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[size_t(j)], 0.5f * j - 1.f);
    EXPECT_EQ(out[size_t(j + 16)], 0.5f * (15 - j) - 1.f);
  }
}

}  // namespace
}  // namespace kvasir::cpu
