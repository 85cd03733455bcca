// kernels/cuda/sampling_rng.h — the sampler's (seed, position) uniform draw,
// usable on host and device. The same function as stages/sampler.cpp's
// sampler_random_bits / sampler_uniform (SplitMix64 output `position` of the
// stream starting at mix64(seed)), so a GPU draw equals the CPU's; a unit
// test compares the two on the CPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvasir::cuda {

__host__ __device__ inline uint64_t sampler_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

__host__ __device__ inline double sampler_uniform_hd(uint64_t seed, uint64_t position) {
  const uint64_t bits = sampler_mix64(sampler_mix64(seed) + (position + 1) * 0x9e3779b97f4a7c15ULL);
  return double(bits >> 11) * 0x1.0p-53;
}

}  // namespace kvasir::cuda
