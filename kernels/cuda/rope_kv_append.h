// kernels/cuda/rope_kv_append.h — RoPE and the KV-cache append in one
// kernel, reading the fused QKV projection's output.
//
// qkv is one [n_tokens, (n_heads + 2·n_kv_heads) · head_dim] f32 matrix (the
// output of one GEMM with the q, k and v weights stacked): per token, q's
// heads, then k's, then v's. For each token:
//   q_out[t]      = rope(q)        f32, the attention's input
//   K cache slot  = bf16(rope(k))  at the token's position (paged_kv_layout.h)
//   V cache slot  = bf16(v)
// The rotation is kernels/cuda/rope.h's (same layouts, rot_dim, Llama-3
// inv_freq, linear factor, angle (f32(pos) / linear_factor) · inv_freq[i],
// accurate sincosf); the append is kv_append.h's (every index checked on the
// device: a token whose position or block is out of range writes nothing to
// the cache and sets *error; its q_out is still written).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/paged_kv_layout.h"
#include "kernels/cuda/rope.h"

namespace kvasir::cuda {

struct RopeKvAppendArgs {
  const float* qkv = nullptr;       // [n_tokens, (n_heads + 2 * kv.n_kv_heads) * head_dim] f32
  float* q_out = nullptr;           // [n_tokens, n_heads * head_dim] f32
  GpuKvLayer kv;                    // head_dim, n_kv_heads and the cache
  GpuAttnBatch batch;               // n_tokens, the rows and their block tables
  const int32_t* pos = nullptr;     // [n_tokens] positions (the RoPE angle's)
  const float* inv_freq = nullptr;  // [rot_dim / 2]
  int32_t n_heads = 0;
  int32_t rot_dim = 0;  // even, <= head_dim
  RopeLayout layout = RopeLayout::kAdjacent;
  float linear_factor = 1.f;
  int32_t* error = nullptr;  // optional device flag (kError*)
};

cudaError_t launch_rope_kv_append(const RopeKvAppendArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
