// kernels/cuda/moe_group.h — groups a batch's (token, j) expert choices by
// expert, deterministically, and gathers the GEMM input rows in that order.
//
// For ids [n, top_k] (moe_route's) the pair i = t·top_k + j goes to grouped
// row offsets[e] + (number of pairs i' < i with the same expert e): experts
// ascending, within an expert the pairs ascending — the order of the CPU's
// counting sort (kernels/cpu/moe.cpp). Outputs:
//   offsets [n_experts + 1]: expert e's rows are offsets[e] .. offsets[e+1]
//   slots [n·top_k]: the pair of each grouped row (-1 past offsets[n_experts])
//   pos [n·top_k]: the grouped row of each pair (-1 for a dropped pair)
//   tiles [max_tiles]: the row tiles of moe_gemm.h, kMoeTileRows rows each,
//     never straddling two experts: tile_expert (-1 = unused), tile_row
//   xs [n·top_k, hidden] bf16: x[slot / top_k] per grouped row, zeros past
//     offsets[n_experts]
// Everything stays on the device (no host sync, graph-capturable): the later
// kernels are launched for the host-known bounds n·top_k and max_tiles and
// skip what is unused.
//
// An id outside [0, n_experts) sets the flag (kErrorExpertId) and its pair
// is dropped (pos -1: it adds nothing in moe_combine); the CPU throws.
//
// Cost: counting and the scans are parallel; placing the pairs is one warp
// walking them 32 at a time (n·top_k / 32 dependent steps) — fine for decode,
// a known serial part for long prefill chunks (not measured).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/moe_route.h"

namespace kvasir::cuda {

// Rows per tile of the grouped expert GEMM (moe_gemm.h).
constexpr int32_t kMoeTileRows = 32;

// Tiles needed for `pairs` grouped rows over n_experts experts: each expert
// adds at most one partial tile. 0 for bad inputs.
inline int64_t moe_max_tiles(int64_t pairs, int32_t n_experts) {
  if (pairs <= 0 || n_experts <= 0) return 0;
  return (pairs + kMoeTileRows - 1) / kMoeTileRows + (pairs < n_experts ? pairs : n_experts);
}

struct MoeGroupArgs {
  const int32_t* ids = nullptr;      // [n, top_k], device
  const __nv_bfloat16* x = nullptr;  // [n, hidden] bf16 (the FFN norm's output)
  int64_t n = 0;                     // tokens; n·top_k <= INT32_MAX
  int32_t top_k = 0;                 // 1..kMoeMaxTopK
  int32_t n_experts = 0;             // 1..kMoeMaxExperts
  int64_t hidden = 0;
  int32_t* offsets = nullptr;      // [n_experts + 1] out
  int32_t* slots = nullptr;        // [n·top_k] out
  int32_t* pos = nullptr;          // [n·top_k] out
  int32_t* tile_expert = nullptr;  // [moe_max_tiles(n·top_k, n_experts)] out
  int32_t* tile_row = nullptr;     // same size, out
  __nv_bfloat16* xs = nullptr;     // [n·top_k, hidden] out
  int32_t* error = nullptr;        // optional flag: kErrorExpertId
};

cudaError_t launch_moe_group(const MoeGroupArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
