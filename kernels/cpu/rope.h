// kernels/cpu/rope.h — rotary position embeddings.
//
// Two layouts (docs/model-formats.md): GGUF llama models rotate adjacent pairs
// (x[2i], x[2i+1]) — kAdjacent; Hugging Face checkpoints and Qwen2 rotate
// (x[i], x[i + rot_dim/2]) — kHalf (NeoX). Dimensions at and past rot_dim are
// left as they are.
//
// Numerics: inv_freq is computed in double and rounded to f32; the angle of
// pair i at position p is the f32 product (f32(p) / linear_factor) * inv_freq[i],
// and cos/sin are taken in f32 — as Hugging Face does (f32 matmul of
// inv_freq and positions, then cos/sin) and within an ulp of llama.cpp
// (which forms p * theta_scale^i in f32).
#pragma once

#include <cstdint>
#include <vector>

namespace kvasir::cpu {

enum class RopeStyle { kAdjacent, kHalf };

struct RopeConfig {
  int head_dim = 0;
  int rot_dim = 0;  // dimensions rotated (== head_dim for Llama); even, <= head_dim
  float theta = 10000.f;
  RopeStyle style = RopeStyle::kAdjacent;
  // Llama 3.x frequency scaling; factor == 0 means none.
  float llama3_factor = 0.f;
  float llama3_low_freq_factor = 1.f;
  float llama3_high_freq_factor = 4.f;
  int llama3_original_context = 8192;
  // Linear position scaling (rope_scaling type "linear"): pos / linear_factor.
  float linear_factor = 1.f;
  // YaRN (rope_scaling type "yarn", as ggml's rope computes it; gpt-oss);
  // factor 0 means none. Pair i's frequency blends the interpolated
  // theta^(-2i/d) / factor with the extrapolated theta^(-2i/d) by a ramp
  // (weight ext_factor) between the correction dims of beta_fast and
  // beta_slow at the original context. The magnitude factor (yarn_mscale)
  // multiplies both q and k, so callers fold its square into the attention
  // scale instead of the rotation.
  float yarn_factor = 0.f;
  int yarn_original_context = 0;
  float yarn_beta_fast = 32.f;
  float yarn_beta_slow = 1.f;
  float yarn_ext_factor = 1.f;
  // The correction dims rounded outwards (floor / ceil), as ggml and
  // vLLM's default do; Hugging Face's `truncate: false` (gpt-oss's
  // config.json) keeps them fractional.
  bool yarn_truncate = true;
};

// YaRN's magnitude factor, 1 + 0.1 ln(factor) (1 without YaRN, with a factor
// <= 1 or with ext_factor 0): what ggml multiplies cos and sin by, once
// llama.cpp's attention factor has cancelled its own copy.
float yarn_mscale(float factor, float ext_factor);

// Inverse frequencies, one per rotated pair (rot_dim / 2), Llama-3 scaling
// applied as Hugging Face's _compute_llama3_parameters does. Throws
// kvasir::Error on an invalid config. (GGUF Llama-3 files may instead carry
// a rope_freqs tensor: divide theta^(-2i/d) by it and pass the result to
// rope() directly — stages/slice.cpp does.)
std::vector<float> rope_inv_freq(const RopeConfig& cfg);

// Rotates x: [n_tokens, n_heads, head_dim] in place; pos[t] is token t's
// position; inv_freq: [rot_dim / 2].
void rope(const RopeConfig& cfg, const float* inv_freq, const int32_t* pos, int64_t n_tokens,
          int n_heads, float* x);

}  // namespace kvasir::cpu
