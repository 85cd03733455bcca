// rmsnorm, swiglu, geglu, add_inplace and rope against reference.h, on both SIMD
// levels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "base/check.h"
#include "base/half.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/simd.h"
#include "reference.h"

namespace kvasir::cpu {
namespace {

struct SimdGuard {
  ~SimdGuard() { simd_reset_for_testing(); }  // back to the start-up mode
};

std::vector<SimdLevel> levels() {
  std::vector<SimdLevel> l{SimdLevel::kScalar};
  if (simd_level_supported() >= SimdLevel::kAvx2) l.push_back(SimdLevel::kAvx2);
  return l;
}

std::vector<float> randn(size_t n, std::mt19937& rng, float sd = 1.f) {
  std::vector<float> v(n);
  std::normal_distribution<float> d(0.f, sd);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST(Norm, RmsnormMatchesReferenceAndAliases) {
  SimdGuard guard;
  std::mt19937 rng(1);
  for (SimdLevel level : levels()) {
    set_simd_level_for_testing(level);
    for (int64_t dim : {1, 7, 64, 576, 1001}) {
      const int64_t n = 3;
      auto x = randn(size_t(n * dim), rng, 3.f);
      const auto w = randn(size_t(dim), rng);
      std::vector<float> want(x.size()), got(x.size());
      ref::rmsnorm(x.data(), w.data(), 1e-5f, n, dim, want.data());
      rmsnorm(x.data(), w.data(), 1e-5f, n, dim, got.data());
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_TRUE(std::isfinite(got[i]));
        ASSERT_NEAR(got[i], want[i], 1e-5f * (1.f + std::fabs(want[i]))) << dim;
      }
      rmsnorm(x.data(), w.data(), 1e-5f, n, dim, x.data());  // in place
      for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], got[i]);
    }
  }
  // All zeros: eps keeps it finite.
  std::vector<float> z(8, 0.f), w(8, 1.f), o(8);
  rmsnorm(z.data(), w.data(), 1e-6f, 1, 8, o.data());
  for (float v : o) EXPECT_EQ(v, 0.f);
}

TEST(Norm, SwigluMatchesReferenceIncludingExtremes) {
  SimdGuard guard;
  std::mt19937 rng(2);
  for (SimdLevel level : levels()) {
    set_simd_level_for_testing(level);
    for (int64_t count : {1, 8, 13, 1536}) {
      auto g = randn(size_t(count), rng, 4.f);
      const auto u = randn(size_t(count), rng);
      if (count >= 8) {
        g[0] = -100.f;  // silu → -0
        g[1] = 100.f;   // silu → g
        g[2] = 0.f;
        g[3] = -88.5f;
        g[4] = 89.f;
      }
      std::vector<float> got(static_cast<size_t>(count));
      swiglu(g.data(), u.data(), count, got.data());
      for (int64_t i = 0; i < count; ++i) {
        const double want = ref::silu(g[size_t(i)]) * u[size_t(i)];
        ASSERT_TRUE(std::isfinite(got[size_t(i)]));
        ASSERT_NEAR(got[size_t(i)], want, 2e-6 * (std::fabs(want) + 1e-3)) << "g=" << g[size_t(i)];
      }
      swiglu(g.data(), u.data(), count, g.data());  // out aliases gate
      for (int64_t i = 0; i < count; ++i) ASSERT_EQ(g[size_t(i)], got[size_t(i)]);
    }
  }
}

TEST(Norm, ClampedSwigluOfGptOss) {
  // Gates and ups across both clamps (limit 7): the gate only from above,
  // the up from both sides; the result from the formula in double.
  std::vector<float> g, u;
  for (float v = -12.f; v <= 12.f; v += 0.37f) {
    g.push_back(v);
    u.push_back(-v * 0.9f + 0.5f);
  }
  const int64_t count = int64_t(g.size());
  std::vector<float> got(g.size());
  swiglu_oai(g.data(), u.data(), count, 1.702f, 7.f, got.data());
  for (int64_t i = 0; i < count; ++i) {
    const double x = std::min(double(g[size_t(i)]), 7.0);
    const double y = std::clamp(double(u[size_t(i)]), -7.0, 7.0);
    const double want = x / (1.0 + std::exp(-1.702 * x)) * (y + 1.0);
    ASSERT_NEAR(got[size_t(i)], want, 1e-5 * (std::fabs(want) + 1e-3)) << "g=" << g[size_t(i)];
  }
  // The last pair (11.9, -10.2): both clamped, 7·σ(1.702·7)·(-7 + 1).
  EXPECT_NEAR(got[size_t(count - 1)], 7.0 / (1.0 + std::exp(-1.702 * 7.0)) * -6.0, 1e-4);
  swiglu_oai(g.data(), u.data(), count, 1.702f, 7.f, g.data());  // out aliases gate
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(g[size_t(i)], got[size_t(i)]);
}

// The formula geglu's table stands for, evaluated per element as ggml does
// (gate and result rounded to f16; 0 / identity beyond +-10).
float geglu_reference(float g, float u) {
  if (g <= -10.f) return 0.f * u;
  if (!(g < 10.f)) return g * u;
  const float gh = fp16_to_f32(f32_to_fp16(g));
  const float t = std::tanh(0.7978845608028654f * gh * (1.f + 0.044715f * gh * gh));
  return fp16_to_f32(f32_to_fp16(0.5f * gh * (1.f + t))) * u;
}

TEST(Norm, GegluBitExactOverEveryF16GateAndBetween) {
  // Every f16 value as a gate (the table's whole domain, infinities and NaNs
  // included), then values between f16 steps, around the +-10 cut-offs and
  // rounding up onto them.
  std::vector<float> gate;
  for (uint32_t h = 0; h < 65536; ++h) gate.push_back(fp16_to_f32(uint16_t(h)));
  for (float g = -12.f; g < 12.f; g += 0.000731f) gate.push_back(g);
  for (float g : {-10.f, 10.f, 9.999f, -9.999f, 9.9999f, -9.9999f, 1e-8f, -1e-8f, 65519.f})
    gate.push_back(g);
  std::vector<float> up(gate.size()), out(gate.size());
  for (size_t i = 0; i < up.size(); ++i) up[i] = 0.5f + float(i % 7) * 0.25f;
  geglu(gate.data(), up.data(), int64_t(gate.size()), out.data());
  for (size_t i = 0; i < gate.size(); ++i) {
    const float want = geglu_reference(gate[i], up[i]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(out[i])) << "gate " << gate[i];
      continue;
    }
    uint32_t a, b;
    std::memcpy(&a, &out[i], 4);
    std::memcpy(&b, &want, 4);
    ASSERT_EQ(a, b) << "gate " << gate[i] << " up " << up[i];
  }
  // In place (out aliases gate), as the forward pass calls it.
  std::vector<float> g2(gate);
  geglu(g2.data(), up.data(), int64_t(g2.size()), g2.data());
  for (size_t i = 0; i < g2.size(); ++i)
    if (!std::isnan(out[i])) ASSERT_EQ(g2[i], out[i]);
}

TEST(Norm, AddInplace) {
  SimdGuard guard;
  std::mt19937 rng(3);
  for (SimdLevel level : levels()) {
    set_simd_level_for_testing(level);
    for (int64_t count : {0, 1, 9, 576}) {
      auto x = randn(size_t(count), rng);
      const auto y = randn(size_t(count), rng);
      const auto x0 = x;
      add_inplace(x.data(), y.data(), count);
      for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], x0[i] + y[i]);
    }
  }
}

TEST(Rope, InvFreqPlain) {
  RopeConfig cfg;
  cfg.head_dim = cfg.rot_dim = 64;
  cfg.theta = 10000.f;
  const auto f = rope_inv_freq(cfg);
  ASSERT_EQ(f.size(), 32u);
  for (int i = 0; i < 32; ++i)
    EXPECT_FLOAT_EQ(f[size_t(i)], float(std::pow(10000.0, -2.0 * i / 64)));
}

TEST(Rope, Llama3ScalingHandComputed) {
  // Llama 3.1: theta 500000, head 128, factor 8, low 1, high 4, original 8192.
  // low_freq_wavelen = 8192, high_freq_wavelen = 2048.
  RopeConfig cfg;
  cfg.head_dim = cfg.rot_dim = 128;
  cfg.theta = 500000.f;
  cfg.llama3_factor = 8.f;
  cfg.llama3_low_freq_factor = 1.f;
  cfg.llama3_high_freq_factor = 4.f;
  cfg.llama3_original_context = 8192;
  const auto f = rope_inv_freq(cfg);
  ASSERT_EQ(f.size(), 64u);
  // i = 0: inv = 1, wavelen 2π < 2048 → unchanged.
  EXPECT_FLOAT_EQ(f[0], 1.f);
  // i = 32: inv = 500000^-0.5 = 0.00141421356; wavelen = 2π·707.1068 = 4442.883
  // (medium); smooth = (8192/4442.883 - 1)/3 = 0.2812823;
  // inv·((1 - smooth)/8 + smooth) = 0.00141421356 · 0.3711220 = 5.2484616e-4.
  EXPECT_NEAR(f[32], 5.2484616e-4f, 1e-10);
  // i = 63: inv = 500000^(-126/128) = 2.4551408e-6; wavelen ≫ 8192 → inv/8.
  EXPECT_NEAR(f[63], 3.068926e-7f, 1e-12);
  // i = 20: 0.0165604 → wavelen 379.4 < 2048: unchanged.
  EXPECT_NEAR(f[20], 0.016560440f, 1e-9);
}

TEST(Rope, BothStylesMatchNaive) {
  std::mt19937 rng(4);
  for (RopeStyle style : {RopeStyle::kAdjacent, RopeStyle::kHalf}) {
    for (int head_dim : {64, 128}) {
      for (int rot_dim : {head_dim, head_dim / 2}) {
        RopeConfig cfg;
        cfg.head_dim = head_dim;
        cfg.rot_dim = rot_dim;
        cfg.theta = 10000.f;
        cfg.style = style;
        const auto inv = rope_inv_freq(cfg);
        const int n_tokens = 5, n_heads = 3;
        const int32_t pos[n_tokens] = {0, 1, 17, 100, 511};
        auto x = randn(size_t(n_tokens * n_heads * head_dim), rng);
        auto want = x;
        rope(cfg, inv.data(), pos, n_tokens, n_heads, x.data());
        for (int t = 0; t < n_tokens; ++t)
          for (int h = 0; h < n_heads; ++h)
            ref::rope_head(want.data() + (t * n_heads + h) * head_dim, head_dim, rot_dim, 10000.0,
                           pos[t], style == RopeStyle::kAdjacent);
        for (size_t i = 0; i < x.size(); ++i) {
          // f32 angles: error ≈ pos · ulp(inv) ≲ 511 · 6e-8.
          ASSERT_NEAR(x[i], want[i], 1e-4) << int(style) << " " << head_dim << " " << rot_dim;
          ASSERT_TRUE(std::isfinite(x[i]));
        }
      }
    }
  }
}

TEST(Rope, PositionZeroIsIdentityAndPairsRotate) {
  RopeConfig cfg;
  cfg.head_dim = cfg.rot_dim = 4;
  cfg.theta = 10000.f;
  const auto inv = rope_inv_freq(cfg);  // {1, 0.01}
  std::vector<float> x = {1, 0, 1, 0};
  const int32_t p0 = 0, p1 = 1;
  rope(cfg, inv.data(), &p0, 1, 1, x.data());
  EXPECT_EQ(x, (std::vector<float>{1, 0, 1, 0}));
  rope(cfg, inv.data(), &p1, 1, 1, x.data());  // adjacent: (x0,x1) by 1 rad, (x2,x3) by 0.01
  EXPECT_NEAR(x[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(x[1], std::sin(1.0), 1e-6);
  EXPECT_NEAR(x[2], std::cos(0.01), 1e-6);
  EXPECT_NEAR(x[3], std::sin(0.01), 1e-6);
  cfg.style = RopeStyle::kHalf;  // (x0,x2) by 1 rad, (x1,x3) by 0.01
  x = {1, 1, 0, 0};
  rope(cfg, inv.data(), &p1, 1, 1, x.data());
  EXPECT_NEAR(x[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(x[2], std::sin(1.0), 1e-6);
  EXPECT_NEAR(x[1], std::cos(0.01), 1e-6);
  EXPECT_NEAR(x[3], std::sin(0.01), 1e-6);
}

TEST(Rope, LinearScalingDividesPositions) {
  std::mt19937 rng(5);
  RopeConfig a, b;
  a.head_dim = a.rot_dim = b.head_dim = b.rot_dim = 64;
  b.linear_factor = 4.f;
  const auto inv = rope_inv_freq(a);
  auto x = randn(64, rng);
  auto y = x;
  const int32_t p40 = 40, p10 = 10;
  rope(b, inv.data(), &p40, 1, 1, x.data());
  rope(a, inv.data(), &p10, 1, 1, y.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(x[i], y[i]);
}

TEST(Rope, YarnBlendsByGgmlsRamp) {
  // gpt-oss's YaRN (factor 32) at the tiny file's shape: head dim 16, theta
  // 150,000, original context 64. ggml's correction dims: floor(corr(32))
  // clamps to 0, ceil(corr(1)) = ceil(16 ln(64 / 2π) / (2 ln 150000)) = 2;
  // pair i keeps 1 - clamp(i / 2, 0, 1) of its extrapolated frequency.
  RopeConfig cfg;
  cfg.head_dim = cfg.rot_dim = 16;
  cfg.theta = 150000.f;
  cfg.style = RopeStyle::kHalf;
  cfg.yarn_factor = 32.f;
  cfg.yarn_original_context = 64;
  const auto inv = rope_inv_freq(cfg);
  ASSERT_EQ(inv.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    const double base = std::pow(150000.0, -2.0 * i / 16.0);
    const double mix = 1.0 - std::clamp(i / 2.0, 0.0, 1.0);
    EXPECT_NEAR(inv[size_t(i)], base / 32.0 * (1.0 - mix) + base * mix, 1e-6 * base) << i;
  }
  EXPECT_FLOAT_EQ(yarn_mscale(32.f, 1.f), 1.f + 0.1f * std::log(32.f));
  EXPECT_EQ(yarn_mscale(32.f, 0.f), 1.f);  // no extrapolation mix: no magnitude factor
  EXPECT_EQ(yarn_mscale(1.f, 1.f), 1.f);
  cfg.yarn_original_context = 0;
  EXPECT_THROW(rope_inv_freq(cfg), kvasir::Error);
}

// Hugging Face's `truncate: false` (the published gpt-oss config.json):
// the correction dims stay fractional. Against transformers'
// _compute_yarn_parameters in double, at gpt-oss's real shape (head dim 64,
// theta 150,000, factor 32 over 4,096): low 8.09, high 17.40, where ggml
// rounds to 8 and 18, so the two differ on the pairs between.
TEST(Rope, YarnWithoutTruncationKeepsFractionalCorrectionDims) {
  RopeConfig cfg;
  cfg.head_dim = cfg.rot_dim = 64;
  cfg.theta = 150000.f;
  cfg.style = RopeStyle::kHalf;
  cfg.yarn_factor = 32.f;
  cfg.yarn_original_context = 4096;
  const auto rounded = rope_inv_freq(cfg);
  cfg.yarn_truncate = false;
  const auto exact = rope_inv_freq(cfg);
  const auto dim = [](double rot) {
    return 64.0 * std::log(4096.0 / (rot * 2.0 * M_PI)) / (2.0 * std::log(150000.0));
  };
  const double low = std::max(0.0, dim(32.0)), high = std::min(63.0, dim(1.0));
  int differ = 0;
  for (int i = 0; i < 32; ++i) {
    const double base = std::pow(150000.0, -2.0 * i / 64.0);
    const double mix = 1.0 - std::clamp((i - low) / (high - low), 0.0, 1.0);
    EXPECT_NEAR(exact[size_t(i)], base / 32.0 * (1.0 - mix) + base * mix, 2e-6 * base) << i;
    differ += rounded[size_t(i)] != exact[size_t(i)];
  }
  EXPECT_GE(differ, 8);
}

TEST(Rope, RejectsBadConfig) {
  RopeConfig cfg;
  cfg.head_dim = 64;
  cfg.rot_dim = 63;
  EXPECT_THROW(rope_inv_freq(cfg), kvasir::Error);
  cfg.rot_dim = 128;
  EXPECT_THROW(rope_inv_freq(cfg), kvasir::Error);
  cfg.rot_dim = 64;
  cfg.llama3_factor = 8.f;
  cfg.llama3_low_freq_factor = cfg.llama3_high_freq_factor = 2.f;
  EXPECT_THROW(rope_inv_freq(cfg), kvasir::Error);
}

}  // namespace
}  // namespace kvasir::cpu
