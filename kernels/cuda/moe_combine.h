// kernels/cuda/moe_combine.h — the weighted sum of a MoE layer's expert
// outputs per token:
//   out[t, :] = Σ_j weights[t, j] · y[pos[t, j], :]
// over the pairs j not dropped (pos -1, see moe_group.h). The terms are added
// in the CPU's order (kernels/cpu/moe.cpp: per token in ascending expert id,
// pairs of the same expert in j order), starting from 0, each product and
// sum rounded separately (no FMA contraction) — so on the same y the result
// should equal the CPU's bit for bit. A token with no pair left gets zeros
// (out + 0 with accumulate).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/moe_route.h"

namespace kvasir::cuda {

struct MoeCombineArgs {
  const float* y = nullptr;        // [rows, hidden] f32, device (moe_gemm's down output)
  int64_t rows = 0;                // rows of y (n·top_k)
  const int32_t* ids = nullptr;    // [n, top_k] (moe_route's; orders the terms)
  const int32_t* pos = nullptr;    // [n, top_k] grouped row of each pair (moe_group's)
  const float* weights = nullptr;  // [n, top_k]
  int64_t n = 0;
  int32_t top_k = 0;  // 1..kMoeMaxTopK
  int64_t hidden = 0;
  float* out = nullptr;  // [n, hidden] f32; must not alias y
  // false: out = the sum. true: out += the sum, added once after the sum is
  // formed — the CPU's residual add (stages/forward.cpp: tmp = moe, then
  // x += tmp), so the GPU's residual stream can take it directly.
  bool accumulate = false;
  int32_t* error = nullptr;  // optional flag: kErrorBatch for pos outside [-1, rows)
                             // (that term is skipped)
};

cudaError_t launch_moe_combine(const MoeCombineArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
