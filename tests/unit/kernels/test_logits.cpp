// The logits passes (kernels/cpu/logits.h): every SIMD level gives the
// scalar level's bits, over odd lengths and the special values a row of
// logits can hold; and the scalar level against plain double arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/logits.h"
#include "kernels/cpu/simd.h"

namespace kvasir::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kMaxFinite = std::numeric_limits<float>::max();

struct SimdGuard {
  ~SimdGuard() { simd_reset_for_testing(); }
};

std::vector<SimdLevel> levels() {
  std::vector<SimdLevel> l;
  for (int i = 0; i < kSimdLevels; ++i)
    if (simd_level_available(SimdLevel(i))) l.push_back(SimdLevel(i));
  return l;
}

// Every remainder against 4, 8 and 16 lanes, and the vocabularies served.
const std::vector<int32_t> kSizes = {0,  1,  2,  3,  4,  5,   7,    8,     9,     15,
                                     16, 17, 31, 33, 63, 100, 1023, 49152, 49155, 262144};

// Logits as a model gives them (sd 4: a few terms dominate the sum; sd 0.5:
// a flat row, where every term moves the sum and the order shows), sprinkled
// with what a sampler must survive.
// A flat row gets only the specials below its values (a +inf would become
// the maximum and every other term 0).
std::vector<float> row(int32_t n, std::mt19937& rng, bool specials, float sd = 4.f) {
  std::normal_distribution<float> d(0.f, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  if (specials && n > 0) {
    std::uniform_int_distribution<int32_t> at(0, n - 1);
    const std::vector<float> odd =
        sd < 1.f ? std::vector<float>{-kInf, std::nanf(""), -200.f, -90.f}
                 : std::vector<float>{-kInf,  kInf,    std::nanf(""), -0.0f, 0.0f,
                                      1e-40f, -1e-40f, -200.f,        88.f};
    for (float s : odd)
      for (int k = 0; k < 3; ++k) v[size_t(at(rng))] = s;
  }
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

template <class T>
uint64_t bits(T x) {
  uint64_t b = 0;
  std::memcpy(&b, &x, sizeof x);
  return b;
}

TEST(Logits, SanitizeMaxSameBitsAtEveryLevel) {
  SimdGuard guard;
  std::mt19937 rng(7);
  for (int32_t n : kSizes) {
    for (bool specials : {false, true}) {
      const std::vector<float> in = row(n, rng, specials);
      set_simd_level_for_testing(SimdLevel::kScalar);
      std::vector<float> want = in;
      const float want_max = logits_sanitize_max(want.data(), n);
      // What sanitising means, from the scalar level.
      float m = -kInf;
      for (int32_t i = 0; i < n; ++i) {
        ASSERT_FALSE(std::isnan(want[size_t(i)]));
        ASSERT_NE(want[size_t(i)], kInf);
        if (in[size_t(i)] == kInf) {
          ASSERT_EQ(want[size_t(i)], kMaxFinite);
        }
        if (std::isnan(in[size_t(i)])) {
          ASSERT_EQ(want[size_t(i)], -kInf);
        }
        m = std::max(m, want[size_t(i)]);
      }
      ASSERT_EQ(want_max, m) << "n " << n;
      for (SimdLevel l : levels()) {
        set_simd_level_for_testing(l);
        std::vector<float> got = in;
        const float got_max = logits_sanitize_max(got.data(), n);
        EXPECT_TRUE(same_bits(got, want)) << simd_level_name(l) << " n " << n;
        EXPECT_EQ(bits(got_max), bits(want_max)) << simd_level_name(l) << " n " << n;
      }
    }
  }
}

TEST(Logits, AZeroMaximumIsPlusZero) {
  SimdGuard guard;
  for (SimdLevel l : levels()) {
    set_simd_level_for_testing(l);
    for (int32_t n : {2, 5, 17, 40}) {
      std::vector<float> v(static_cast<size_t>(n), -0.0f);
      v[0] = -kInf;
      EXPECT_EQ(bits(logits_sanitize_max(v.data(), n)), bits(0.0f)) << simd_level_name(l);
    }
    std::vector<float> dead(9, std::nanf(""));
    EXPECT_EQ(logits_sanitize_max(dead.data(), 9), -kInf);
  }
}

TEST(Logits, ExpSumSameBitsAtEveryLevel) {
  SimdGuard guard;
  std::mt19937 rng(11);
  for (int32_t n : kSizes) {
    for (float inv_t : {1.0f, 1.0f / 0.7f, 0.3f, 40.0f}) {
      std::vector<float> x = row(n, rng, true, inv_t == 1.0f ? 0.5f : 4.f);
      set_simd_level_for_testing(SimdLevel::kScalar);
      const float max = logits_sanitize_max(x.data(), n);
      if (n == 0 || max == -kInf) continue;
      std::vector<float> want_out(static_cast<size_t>(n));
      const double want = logits_exp_sum(x.data(), n, max, inv_t, want_out.data());
      ASSERT_EQ(bits(logits_exp_sum(x.data(), n, max, inv_t, nullptr)), bits(want));
      // The scalar level against double arithmetic: each term to ~2e-7 of
      // exp at its (float) argument, exactly 0 below e^-87.3.
      double exact = 0.0;
      for (int32_t i = 0; i < n; ++i) {
        const float tf = (x[size_t(i)] - max) * inv_t;
        const double t = tf;
        const double e = t < -87.3 ? 0.0 : std::exp(t);
        exact += e;
        ASSERT_NEAR(want_out[size_t(i)], e, 4e-7 * e + 1e-37) << "n " << n << " i " << i;
      }
      ASSERT_NEAR(want, exact, 1e-4 * exact);  // float lanes over up to 65,536 terms each
      for (SimdLevel l : levels()) {
        set_simd_level_for_testing(l);
        std::vector<float> out(static_cast<size_t>(n), -1.0f);
        EXPECT_EQ(bits(logits_exp_sum(x.data(), n, max, inv_t, out.data())), bits(want))
            << simd_level_name(l) << " n " << n << " 1/T " << inv_t;
        EXPECT_TRUE(same_bits(out, want_out)) << simd_level_name(l) << " n " << n;
        EXPECT_EQ(bits(logits_exp_sum(x.data(), n, max, inv_t, nullptr)), bits(want));
      }
    }
  }
}

TEST(Logits, FindIsTheFirstEqualEntry) {
  SimdGuard guard;
  std::mt19937 rng(3);
  for (SimdLevel l : levels()) {
    set_simd_level_for_testing(l);
    for (int32_t n : kSizes) {
      std::vector<float> x(static_cast<size_t>(n), 1.0f);
      EXPECT_EQ(logits_find(x.data(), n, 2.0f), n) << simd_level_name(l);  // absent
      EXPECT_EQ(logits_find(x.data(), n, std::nanf("")), n);               // NaN equals nothing
      if (n == 0) continue;
      std::uniform_int_distribution<int32_t> at(0, n - 1);
      const int32_t a = at(rng), b = at(rng);
      x[size_t(a)] = 5.0f;
      x[size_t(b)] = 5.0f;
      EXPECT_EQ(logits_find(x.data(), n, 5.0f), std::min(a, b)) << simd_level_name(l) << " n " << n;
      x[size_t(n - 1)] = -0.0f;  // -0 == +0
      const int32_t z = logits_find(x.data(), n, 0.0f);
      EXPECT_EQ(z, n - 1) << simd_level_name(l);
    }
  }
}

}  // namespace
}  // namespace kvasir::cpu
