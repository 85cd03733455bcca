// kernels/cuda/sampling.h — token sampling on the GPU, so only ids leave the
// tail stage.
//
// Semantics follow stages/sampler.h (the CPU sampler) for the controls done
// here: NaN logits are -inf, +inf is the largest finite float; greedy
// (temperature < 1e-5) is the argmax with ties to the lowest id; otherwise
// probabilities exp((x - max) / T), then top-k, top-p, min-p in that order,
// candidates in canonical order (value desc, id asc), and the draw is the
// inverse CDF at u = sampler_uniform(seed, position) — the same SplitMix64
// (seed, position) draw as the CPU — walked in id order when neither top-k
// nor top-p is active (the CPU's dense path) and in canonical order
// otherwise. Masses are summed in double in another order than the CPU, so a
// draw landing within ~1e-12 of a boundary may pick the neighbour.
//
// NOT done here: repetition / presence / frequency penalties and logprobs.
// Rows that need them must be sampled on the host (copy the row's logits).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kvasir::cuda {

// One row's controls (device array of n_rows). Plain data; validated on the
// host with validate_sampling before upload, and re-checked by the kernel
// (a NaN / out-of-range control makes that row greedy and sets flags).
struct GpuSamplingRow {
  float temperature = 0.f;  // < 1e-5 = greedy
  float top_p = 1.f;        // (0, 1]
  float min_p = 0.f;        // [0, 1]
  int32_t top_k = 0;        // 0 = off
  uint64_t seed = 0;
  uint64_t position = 0;  // position of the token being sampled (keys the RNG)
};

// Per-row result flags (bit set).
constexpr int32_t kSampleAllMasked = 1;  // every logit NaN / -inf: token 0
constexpr int32_t kSampleBadParams = 2;  // controls out of range: sampled greedily

struct SampleArgs {
  const float* logits = nullptr;         // [n_rows, vocab] f32, device (not modified)
  const GpuSamplingRow* rows = nullptr;  // [n_rows] device
  int32_t n_rows = 0;
  int32_t vocab = 0;
  int32_t* tokens = nullptr;  // [n_rows] out, device
  int32_t* flags = nullptr;   // [n_rows] out (kSample* bits), may be null
};

cudaError_t launch_sample(const SampleArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
