#include "kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "base/check.h"

namespace kvasir::cpu {
namespace {

void check_config(const RopeConfig& cfg) {
  KV_CHECK(cfg.head_dim > 0, "rope: head_dim {} must be positive", cfg.head_dim);
  KV_CHECK(cfg.rot_dim > 0 && cfg.rot_dim % 2 == 0 && cfg.rot_dim <= cfg.head_dim,
           "rope: rot_dim {} must be even and in (0, head_dim = {}]", cfg.rot_dim, cfg.head_dim);
  KV_CHECK(cfg.theta > 0.f && std::isfinite(cfg.theta), "rope: theta {} must be positive",
           cfg.theta);
  KV_CHECK(cfg.linear_factor > 0.f && std::isfinite(cfg.linear_factor),
           "rope: linear factor {} must be positive", cfg.linear_factor);
  if (cfg.llama3_factor != 0.f) {
    KV_CHECK(cfg.llama3_factor > 0.f, "rope: llama3 factor {} must be positive", cfg.llama3_factor);
    KV_CHECK(cfg.llama3_high_freq_factor != cfg.llama3_low_freq_factor,
             "rope: llama3 high and low frequency factors are both {}", cfg.llama3_low_freq_factor);
    KV_CHECK(cfg.llama3_low_freq_factor > 0.f && cfg.llama3_high_freq_factor > 0.f &&
                 cfg.llama3_original_context > 0,
             "rope: llama3 factors and original context must be positive");
  }
  if (cfg.yarn_factor != 0.f) {
    KV_CHECK(cfg.yarn_factor > 0.f && std::isfinite(cfg.yarn_factor),
             "rope: yarn factor {} must be positive", cfg.yarn_factor);
    KV_CHECK(cfg.yarn_original_context > 0, "rope: yarn original context {} must be positive",
             cfg.yarn_original_context);
    KV_CHECK(
        cfg.yarn_beta_fast > 0.f && cfg.yarn_beta_slow > 0.f && std::isfinite(cfg.yarn_ext_factor),
        "rope: yarn betas {} / {} must be positive", cfg.yarn_beta_fast, cfg.yarn_beta_slow);
  }
}

// ggml's ggml_rope_yarn_corr_dim: the pair index whose wavelength fits
// n_rot turns into the original context.
float yarn_corr_dim(const RopeConfig& cfg, float n_rot) {
  return float(cfg.rot_dim) *
         std::log(float(cfg.yarn_original_context) / (n_rot * 2.f * float(std::numbers::pi))) /
         (2.f * std::log(cfg.theta));
}

// The fraction of the extrapolated frequency pair i keeps (ggml's
// rope_yarn_ramp times ext_factor), in f32 as ggml computes it.
float yarn_mix(const RopeConfig& cfg, int i) {
  float low = yarn_corr_dim(cfg, cfg.yarn_beta_fast), high = yarn_corr_dim(cfg, cfg.yarn_beta_slow);
  if (cfg.yarn_truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(0.f, low);
  high = std::min(float(cfg.rot_dim - 1), high);
  const float y = (float(i) - low) / std::max(0.001f, high - low);
  return (1.f - std::min(1.f, std::max(0.f, y))) * cfg.yarn_ext_factor;
}

}  // namespace

float yarn_mscale(float factor, float ext_factor) {
  return factor > 1.f && ext_factor != 0.f ? 1.f + 0.1f * std::log(factor) : 1.f;
}

std::vector<float> rope_inv_freq(const RopeConfig& cfg) {
  check_config(cfg);
  const int half = cfg.rot_dim / 2;
  std::vector<float> out(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    double inv = std::pow(double(cfg.theta), -2.0 * i / double(cfg.rot_dim));
    if (cfg.llama3_factor != 0.f) {
      const double factor = cfg.llama3_factor;
      const double low = cfg.llama3_low_freq_factor, high = cfg.llama3_high_freq_factor;
      const double orig = cfg.llama3_original_context;
      const double low_freq_wavelen = orig / low;
      const double high_freq_wavelen = orig / high;
      const double wavelen = 2.0 * std::numbers::pi / inv;
      if (wavelen < high_freq_wavelen) {
        // high frequency: unchanged
      } else if (wavelen > low_freq_wavelen) {
        inv = inv / factor;
      } else {
        const double smooth = (orig / wavelen - low) / (high - low);
        inv = (1.0 - smooth) * inv / factor + smooth * inv;
      }
    }
    if (cfg.yarn_factor != 0.f) {
      const double mix = yarn_mix(cfg, i);
      inv = inv / double(cfg.yarn_factor) * (1.0 - mix) + inv * mix;
    }
    out[size_t(i)] = float(inv);
  }
  return out;
}

void rope(const RopeConfig& cfg, const float* inv_freq, const int32_t* pos, int64_t n_tokens,
          int n_heads, float* x) {
  check_config(cfg);
  KV_CHECK(n_tokens >= 0 && n_heads >= 0, "rope: bad shape [{} tokens x {} heads]", n_tokens,
           n_heads);
  if (n_tokens == 0 || n_heads == 0) return;
  KV_CHECK(inv_freq && pos && x, "rope: null input");
  const int half = cfg.rot_dim / 2;
  thread_local std::vector<float> cs;  // [half] cos then [half] sin; grow-only
  if (cs.size() < size_t(2 * half)) cs.resize(size_t(2 * half));
  float* cosv = cs.data();
  float* sinv = cs.data() + half;
  for (int64_t t = 0; t < n_tokens; ++t) {
    KV_CHECK(pos[t] >= 0, "rope: token {} has negative position {}", t, pos[t]);
    const float p = float(pos[t]) / cfg.linear_factor;
    for (int i = 0; i < half; ++i) {
      const float a = p * inv_freq[i];
      cosv[i] = std::cos(a);
      sinv[i] = std::sin(a);
    }
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * int64_t(cfg.head_dim);
      if (cfg.style == RopeStyle::kAdjacent) {
        for (int i = 0; i < half; ++i) {
          const float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * cosv[i] - b * sinv[i];
          v[2 * i + 1] = a * sinv[i] + b * cosv[i];
        }
      } else {
        for (int i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half];
          v[i] = a * cosv[i] - b * sinv[i];
          v[i + half] = a * sinv[i] + b * cosv[i];
        }
      }
    }
  }
}

}  // namespace kvasir::cpu
