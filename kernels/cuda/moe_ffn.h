// kernels/cuda/moe_ffn.h — a MoE layer's expert FFN on the device, from the
// router's choices to the combined output, as cpu::moe_ffn (kernels/cpu/
// moe.h) with every expert held:
//   moe_group (grouping + gathered rows) → moe_gemm gate and up (f32) →
//   swiglu (bf16) → moe_gemm down (f32) → moe_combine
// All on `stream`, no host sync, no allocation: the caller passes a device
// workspace of moe_ffn_workspace_bytes(). The router (its GEMM and
// launch_moe_route) is the caller's, so ids/weights may come from elsewhere.
//
// Numerics against cpu::moe_ffn given the same values (x bf16 here, the same
// numbers in f32 there; the same bf16 weights): the GPU rounds the SwiGLU
// output to bf16 before the down GEMM (the CPU keeps f32), hence an error of
// about 2^-9 of Σ_j |w_j| Σ_f |down_e[c, f] · act_e[f]| per output (the
// test allows 4e-3 of it).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kvasir::cuda {

struct MoeFfnArgs {
  const __nv_bfloat16* x = nullptr;  // [n, hidden] bf16, device
  const int32_t* ids = nullptr;      // [n, top_k] (moe_route's)
  const float* weights = nullptr;    // [n, top_k]
  int64_t n = 0;
  int32_t top_k = 0;
  int32_t n_experts = 0;
  int64_t hidden = 0, ffn = 0;
  const __nv_bfloat16* gate = nullptr;  // [n_experts][ffn][hidden] bf16
  const __nv_bfloat16* up = nullptr;    // [n_experts][ffn][hidden]
  const __nv_bfloat16* down = nullptr;  // [n_experts][hidden][ffn]
  float* out = nullptr;                 // [n, hidden] f32
  bool accumulate = false;              // out += the layer's output (moe_combine.h)
  void* workspace = nullptr;            // device, >= moe_ffn_workspace_bytes(...)
  size_t workspace_bytes = 0;
  int32_t* error = nullptr;  // optional flag (kErrorExpertId, kErrorBatch)
};

// Bytes of workspace for these shapes; 0 when they are invalid (the limits of
// moe_route.h, n·top_k <= INT32_MAX, no overflow).
size_t moe_ffn_workspace_bytes(int64_t n, int32_t top_k, int32_t n_experts, int64_t hidden,
                               int64_t ffn);

// cudaErrorInvalidValue for bad shapes, null pointers or a short workspace;
// otherwise the first failing launch's error.
cudaError_t launch_moe_ffn(const MoeFfnArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
