// kernels/cuda/moe_gemm.h — the grouped expert GEMM of a MoE layer:
//   y[r, :] = xs[r, :] · W_e[:, :]ᵀ   for each grouped row r of expert e
// with xs [rows, k] bf16 (moe_group.h's gathered rows), W the layer's expert
// stack [n_experts][n_out][k] bf16 (one output feature per row, as gemm.h's
// B) and y [rows, n_out] f32. The rows of each expert and their tiles come
// from moe_group.h on the device: nothing is read back to the host, so the
// layer stays graph-capturable, and an expert no token chose is not read.
//
// A plain shared-memory tiled kernel (kMoeTileRows x 64 outputs per block,
// f32 FMA accumulation, no tensor cores): chosen for being obviously correct
// over being fast. The alternative — launch_gemm (cuBLASLt) once per expert —
// needs the per-expert counts on the host (a sync per layer) and one launch
// per expert.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/moe_group.h"

namespace kvasir::cuda {

struct MoeGemmArgs {
  const __nv_bfloat16* xs = nullptr;     // [rows, k] bf16, device
  const __nv_bfloat16* w = nullptr;      // [n_experts][n_out][k] bf16
  const int32_t* offsets = nullptr;      // [n_experts + 1] (moe_group)
  const int32_t* tile_expert = nullptr;  // [n_tiles] (moe_group; -1 = unused)
  const int32_t* tile_row = nullptr;     // [n_tiles]
  int64_t n_tiles = 0;                   // moe_max_tiles(rows, n_experts)
  int64_t rows = 0;                      // rows of xs and y (n·top_k)
  int32_t n_experts = 0;
  int64_t n_out = 0, k = 0;
  float* y = nullptr;        // [rows, n_out] f32; rows no tile covers are not written
  int32_t* error = nullptr;  // optional flag: kErrorExpertId for a malformed tile
};

cudaError_t launch_moe_gemm(const MoeGemmArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
