// kernels/cuda/moe_route.h — the MoE router's top-k on the device, with the
// semantics of cpu::moe_route (kernels/cpu/moe.h): per token p =
// softmax(logits) over all experts in double, the k largest in descending
// order (equal: the lower id first) → ids, their p → weights (f32), divided
// by their sum (clamped below at 2^-14) when norm_topk.
//
// The order is taken on the f32 logits (softmax is monotonic), not on the
// double probabilities the CPU compares: the two differ only where two
// distinct logits both lie more than ~745 below the row's max (both p
// underflow to 0 in double and the CPU ties them by id) — then the weights
// are 0 either way. A row with a non-finite logit gets ids 0..k-1 and
// weights 0 and sets the flag (kErrorRouterLogit); the CPU throws instead.
// Its FFN output is then 0 · FFN(x), NaN where x itself is not finite: the
// bad row is flagged, not hidden.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvasir::cuda {

// Limits shared by the MoE kernels (moe_route, moe_group, moe_gemm,
// moe_combine): the launchers reject larger values.
constexpr int32_t kMoeMaxExperts = 1024;
constexpr int32_t kMoeMaxTopK = 64;

struct MoeRouteArgs {
  const float* logits = nullptr;  // [n, n_experts] f32, device (the router GEMM's output)
  int64_t n = 0;                  // tokens
  int32_t n_experts = 0;          // 1..kMoeMaxExperts
  int32_t top_k = 0;              // 1..min(n_experts, kMoeMaxTopK)
  bool norm_topk = false;
  int32_t* ids = nullptr;    // [n, top_k] out: chosen experts, descending probability
  float* weights = nullptr;  // [n, top_k] out
  int32_t* error = nullptr;  // optional flag: kErrorRouterLogit (paged_kv_layout.h)
};

cudaError_t launch_moe_route(const MoeRouteArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
