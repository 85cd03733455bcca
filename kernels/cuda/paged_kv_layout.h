// kernels/cuda/paged_kv_layout.h — the paged KV cache on a GPU, described once
// for the CUDA kernels and the host code that builds their inputs.
//
// Same layout as the CPU cache (kernels/cpu/paged_kv.h), element type bf16:
//
//   K, V: [n_blocks][n_kv_heads][block_size][head_dim]   bf16, device memory
//
// A sequence owns a block table: logical block i (positions
// i*block_size .. (i+1)*block_size-1) lives in physical block table[i].
// Head-major blocks keep one KV head's keys contiguous, so attention reads a
// block once per KV head for every query head of its group (GQA).
//
// A batch is described by GpuAttnBatch: the new tokens of every sequence are
// packed one sequence after another ([T, ...] arrays, T = q_start[n_seqs]).
// All pointers in it are device pointers. Host code fills the arrays on the
// host, checks them with check_attn_batch_host() (every index a kernel will
// follow), then uploads them. The kernels check again on the device (a block
// id out of range, a position past the table): they never read or write out
// of bounds; the offending token gets NaN outputs / is not written, and
// *error (when given) is set to a non-zero kError* code.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <string>

namespace kvasir::cuda {

// Device-side error codes written to an optional int32 flag (first wins is
// not guaranteed: any non-zero value means the batch was malformed).
constexpr int32_t kErrorNone = 0;
constexpr int32_t kErrorBlockId = 1;   // a block table entry outside [0, n_blocks)
constexpr int32_t kErrorPosition = 2;  // a position past the sequence's table
constexpr int32_t kErrorTokenId = 3;   // a token id outside [0, vocab)
constexpr int32_t kErrorBatch = 4;     // q_start not increasing / a token in no sequence
constexpr int32_t kErrorRouterLogit = 5;  // a non-finite MoE router logit (moe_route.h)
constexpr int32_t kErrorExpertId = 6;     // an expert id outside [0, n_experts) (moe_group.h)

struct GpuKvLayer {
  __nv_bfloat16* k = nullptr;  // [n_blocks][n_kv_heads][block_size][head_dim]
  __nv_bfloat16* v = nullptr;  // same shape
  int32_t n_blocks = 0;
  int32_t block_size = 16;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
};

// Element offset of (physical block, kv head, slot, 0) in K or V.
__host__ __device__ inline int64_t kv_offset(const GpuKvLayer& kv, int64_t block, int64_t head,
                                             int64_t slot) {
  return ((block * kv.n_kv_heads + head) * kv.block_size + slot) * kv.head_dim;
}

struct GpuAttnBatch {
  // [n_seqs + 1] first packed token of each sequence; q_start[0] = 0,
  // non-decreasing, q_start[n_seqs] = n_tokens.
  const int32_t* q_start = nullptr;
  // [n_seqs] position of each sequence's first new token (tokens of the
  // sequence sit at pos0 .. pos0 + n_new - 1; it attends to 0 .. its pos).
  const int32_t* pos0 = nullptr;
  // [n_seqs][max_blocks] row-major; sequence s uses entries
  // 0 .. (pos0[s] + n_new - 1) / block_size, the rest are ignored.
  const int32_t* block_tables = nullptr;
  int32_t n_seqs = 0;
  int32_t n_tokens = 0;    // T
  int32_t max_blocks = 0;  // row stride of block_tables
  // Host-known upper bound of pos0[s] + n_new(s) over the batch (the longest
  // context any token attends to); sizes the split-KV grid. A token whose
  // context exceeds it is an error (kErrorPosition), never a silent cut.
  int32_t max_context = 0;
};

// Host-side check of a batch whose arrays are still on the host (same shapes
// as GpuAttnBatch's). Empty if the batch is well formed for `kv`; otherwise a
// message naming the first problem. Checks shapes, overflow, q_start order,
// every table entry a kernel will follow, and max_context.
std::string check_attn_batch_host(const GpuKvLayer& kv, const int32_t* q_start, const int32_t* pos0,
                                  const int32_t* block_tables, int32_t n_seqs, int32_t n_tokens,
                                  int32_t max_blocks, int32_t max_context);

}  // namespace kvasir::cuda
