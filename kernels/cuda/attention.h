// kernels/cuda/attention.h — causal paged attention with grouped-query heads,
// for prefill chunks and decode in one launcher.
//
// Token t of sequence s (position p) attends to positions 0..p of s through
// its block table. Online softmax in f32, f32 accumulation, bf16 K/V.
// Split-KV: when the batch has few (token, head) pairs for the GPU (decode),
// each pair's context is cut into partitions of kAttnPartition positions
// processed by separate thread blocks, then merged (log-sum-exp) by a second
// kernel. The partial results live in the caller's workspace; if the
// workspace is too small the launcher uses fewer partitions (down to one,
// which needs none), never an error.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/paged_kv_layout.h"

namespace kvasir::cuda {

constexpr int32_t kAttnPartition = 512;  // positions per split-KV partition
// A batch with fewer (token, query head) pairs than this splits (decode):
// each pair gets up to ceil(max_context / kAttnPartition) partitions.
constexpr int64_t kAttnSplitBelowPairs = 2048;

struct PagedAttentionArgs {
  GpuKvLayer kv;
  GpuAttnBatch batch;
  const float* q = nullptr;      // [n_tokens, n_heads, head_dim] f32 (after RoPE), device
  int32_t n_heads = 0;           // a multiple of kv.n_kv_heads; kv.head_dim in 1..256
  float scale = 0.f;             // usually 1/sqrt(head_dim)
  __nv_bfloat16* out = nullptr;  // [n_tokens, n_heads, head_dim] bf16
  float* workspace = nullptr;    // split-KV partials, device; may be null
  size_t workspace_bytes = 0;
  int32_t* error = nullptr;  // optional device flag (kError*)
};

// Workspace that lets the launcher use as many partitions as it wants for a
// batch of n_tokens tokens whose longest context is max_context (0 if it
// would not split).
size_t paged_attention_workspace_bytes(int32_t n_tokens, int32_t n_heads, int32_t head_dim,
                                       int32_t max_context);

cudaError_t launch_paged_attention(const PagedAttentionArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
