// kernels/cpu/rope.h — rotary position embeddings.
//
// Two layouts (see NOTES-model.md): GGUF llama models rotate adjacent pairs
// (x[2i], x[2i+1]) — kAdjacent; Hugging Face checkpoints and Qwen2 rotate
// (x[i], x[i + d/2]) — kHalf (NeoX).
#pragma once

#include <cstdint>
#include <vector>

namespace kvasir::cpu {

enum class RopeStyle { kAdjacent, kHalf };

struct RopeConfig {
  int head_dim = 0;
  int rot_dim = 0;  // dimensions rotated (== head_dim for Llama)
  float theta = 10000.f;
  RopeStyle style = RopeStyle::kAdjacent;
  // Llama 3.x frequency scaling; factor == 0 means none.
  float llama3_factor = 0.f;
  float llama3_low_freq_factor = 1.f;
  float llama3_high_freq_factor = 4.f;
  int llama3_original_context = 8192;
  // Linear position scaling (rope_scaling type "linear"): pos / linear_factor.
  float linear_factor = 1.f;
};

// Inverse frequencies, one per rotated pair (rot_dim / 2), scaling applied.
std::vector<float> rope_inv_freq(const RopeConfig& cfg);

// Rotates x: [n_tokens, n_heads, head_dim] in place; pos[t] is token t's position.
void rope(const RopeConfig& cfg, const float* inv_freq, const int32_t* pos, int64_t n_tokens,
          int n_heads, float* x);

}  // namespace kvasir::cpu
