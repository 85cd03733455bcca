// kernels/cuda/rope.h — rotary position embeddings on q and k, in place.
//
// Both layouts of kernels/cpu/rope.h: kAdjacent rotates (x[2i], x[2i+1])
// (GGUF llama), kHalf rotates (x[i], x[i + rot_dim/2]) (HF / NeoX). Llama-3
// and linear scaling: inv_freq comes from kvasir::cpu::rope_inv_freq (host,
// double precision, uploaded once); the angle is the f32 product
// (f32(pos) / linear_factor) * inv_freq[i], as on the CPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvasir::cuda {

enum class RopeLayout : int32_t { kAdjacent = 0, kHalf = 1 };

struct RopeArgs {
  float* q = nullptr;               // [n_tokens, n_q_heads, head_dim] f32, device
  float* k = nullptr;               // [n_tokens, n_k_heads, head_dim] f32 or null
  const int32_t* pos = nullptr;     // [n_tokens] positions
  const float* inv_freq = nullptr;  // [rot_dim / 2] f32
  int32_t n_tokens = 0;
  int32_t n_q_heads = 0;
  int32_t n_k_heads = 0;  // 0 when k is null
  int32_t head_dim = 0;
  int32_t rot_dim = 0;  // even, <= head_dim; dims past it are untouched
  RopeLayout layout = RopeLayout::kAdjacent;
  float linear_factor = 1.f;  // > 0
};

cudaError_t launch_rope(const RopeArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
