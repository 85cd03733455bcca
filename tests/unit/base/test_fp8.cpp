// base/fp8.h against the E4M3 format's definition: every code decoded to
// the value its fields define; the encoder against a brute-force search for
// the nearest finite code (ties to the even code, saturation at ±448) over
// every bf16 value, every exact tie and its neighbours, and random floats;
// row quantisation's scale and error bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "base/fp8.h"

namespace kvasir::fp8 {
namespace {

// The value of a code from its fields, in double, with pow: a second
// spelling of the definition, independent of the code under test.
double by_definition(uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 0xF, m = c & 7;
  const double mag =
      e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -mag : mag;
}

// Nearest finite code to x by exhaustive search: ties go to the even code
// (the one whose mantissa's last bit is 0), beyond 448 saturates.
uint8_t brute_force(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(double(x));
  if (a > 448.0) return sign | 0x7E;
  int best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7E; ++c) {
    const double d = std::fabs(by_definition(uint8_t(c)) - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return uint8_t(sign | best);
}

float bits_to_f32(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

TEST(Fp8E4M3, EveryCodeDecodesToItsDefinedValue) {
  for (int c = 0; c < 256; ++c) {
    const float got = e4m3_to_f32(uint8_t(c));
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(got)) << c;
      continue;
    }
    EXPECT_EQ(double(got), by_definition(uint8_t(c))) << c;
    EXPECT_EQ(std::signbit(got), c >= 0x80) << c;
  }
  // Landmarks of the format.
  EXPECT_EQ(e4m3_to_f32(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_to_f32(0x07), 7 * 0x1p-9f);
  EXPECT_EQ(e4m3_to_f32(0x08), 0x1p-6f);
  EXPECT_EQ(e4m3_to_f32(0x38), 1.f);
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.f);
  EXPECT_EQ(e4m3_to_f32(0xFE), -448.f);
  EXPECT_EQ(e4m3_to_f32(0xB8), -1.f);
}

TEST(Fp8E4M3, EncodingRoundTripsEveryFiniteCode) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(uint8_t(c))), c) << c;
  }
}

TEST(Fp8E4M3, EncodesEveryBf16ValueAsTheNearestCode) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float x = bits_to_f32(h << 16);
    ASSERT_EQ(f32_to_e4m3(x), brute_force(x)) << "bf16 bits " << h << " = " << x;
  }
}

TEST(Fp8E4M3, TiesGoToTheEvenCodeAndNeighboursToTheNearer) {
  int ties = 0;
  for (int c = 0; c < 0x7E; ++c) {
    const float lo = e4m3_to_f32(uint8_t(c)), hi = e4m3_to_f32(uint8_t(c + 1));
    const float mid = lo + (hi - lo) / 2;  // exact: a few bits of mantissa
    ASSERT_EQ(double(mid), (double(lo) + double(hi)) / 2);
    for (float s : {1.f, -1.f}) {
      const float x = s * mid;
      const uint8_t sign = s < 0 ? 0x80 : 0;
      EXPECT_EQ(f32_to_e4m3(x), uint8_t(sign | ((c & 1) ? c + 1 : c))) << x;
      EXPECT_EQ(f32_to_e4m3(std::nextafter(x, 0.f)), uint8_t(sign | c)) << x;
      EXPECT_EQ(f32_to_e4m3(std::nextafter(x, s * 1e9f)), uint8_t(sign | (c + 1))) << x;
      ++ties;
    }
  }
  EXPECT_EQ(ties, 2 * 0x7E);
}

TEST(Fp8E4M3, SaturatesBeyond448AndKeepsNaN) {
  for (float x : {448.f, 449.f, 463.99f, 464.f, 480.f, 1e6f, std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(f32_to_e4m3(x), 0x7E) << x;
    EXPECT_EQ(f32_to_e4m3(-x), 0xFE) << x;
  }
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(f32_to_e4m3(0.f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-0.f), 0x80);
  EXPECT_EQ(f32_to_e4m3(0x1p-11f), 0x00);                      // below half the smallest subnormal
  EXPECT_EQ(f32_to_e4m3(0x1p-10f), 0x00);                      // exactly half: tie to the even 0
  EXPECT_EQ(f32_to_e4m3(0x1.8p-10f), 0x01);                    // above half
  EXPECT_EQ(f32_to_e4m3(std::nextafter(0x1p-6f, 0.f)), 0x08);  // rounds up into the normals
}

TEST(Fp8E4M3, RandomFloatsMatchTheBruteForce) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_real_distribution<float> small(-500.f, 500.f);
  for (int i = 0; i < 200000; ++i) {
    const float a = bits_to_f32(bits(rng)), b = small(rng);
    ASSERT_EQ(f32_to_e4m3(a), brute_force(a)) << a;
    ASSERT_EQ(f32_to_e4m3(b), brute_force(b)) << b;
  }
}

TEST(Fp8E4M3, RowQuantisationScalesTheLargestValueTo448) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 0.02f);
  for (int64_t n : {1, 7, 16, 1000}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = nd(rng);
    x[size_t(n / 2)] = -0.1f;  // the amax
    std::vector<uint8_t> q(static_cast<size_t>(n));
    const float scale = quantize_row_e4m3(x.data(), n, q.data());
    EXPECT_EQ(scale, 0.1f / 448.f);
    EXPECT_EQ(q[size_t(n / 2)], 0xFE);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(q[size_t(i)], f32_to_e4m3(x[size_t(i)] * (448.f / 0.1f)));
      // Relative error of a normal code: at most 2^-4 (half of 1/8); the
      // subnormal range adds at most half its quantum, 2^-10.
      const float back = scale * e4m3_to_f32(q[size_t(i)]);
      EXPECT_LE(std::fabs(back - x[size_t(i)]),
                std::fabs(x[size_t(i)]) * 0x1p-4f + scale * 0x1p-10f + 1e-12f);
    }
  }
  std::vector<float> zeros(5, 0.f);
  std::vector<uint8_t> q(5, 0xAA);
  EXPECT_EQ(quantize_row_e4m3(zeros.data(), 5, q.data()), 1.f);
  for (uint8_t c : q) EXPECT_EQ(c, 0);
  std::vector<float> inf = {1.f, std::numeric_limits<float>::infinity()};
  EXPECT_EQ(quantize_row_e4m3(inf.data(), 2, q.data()), 1.f);  // not finite: as it is
  EXPECT_EQ(q[0], 0x38);
  EXPECT_EQ(q[1], 0x7E);
}

TEST(Fp8E4M3, DTypeIsOneBytePerElementAndNotACpuWeightType) {
  const DTypeInfo& t = dtype_info(DType::F8_E4M3);
  EXPECT_STREQ(t.name, "F8_E4M3");
  EXPECT_EQ(t.block, 1);
  EXPECT_EQ(t.bytes, 1);
  EXPECT_FALSE(t.computable);
  EXPECT_EQ(dtype_row_bytes(DType::F8_E4M3, 4096), 4096u);
}

}  // namespace
}  // namespace kvasir::fp8
