// kernels/cpu/norm.h — RMSNorm and elementwise ops of a Llama block.
// AVX2 paths when simd_level() allows; all accumulate in f32 or better.
#pragma once

#include <cstdint>

namespace kvasir::cpu {

// out[i, :] = x[i, :] / sqrt(mean(x[i, :]²) + eps) * weight   (x, out: [n, dim])
// out may alias x.
void rmsnorm(const float* x, const float* weight, float eps, int64_t n, int64_t dim, float* out);

// out[i] = silu(gate[i]) * up[i], for i < count. out may alias gate.
// silu(g) = g / (1 + exp(-g)); the AVX2 path uses a polynomial exp
// (relative error ~1e-7).
void swiglu(const float* gate, const float* up, int64_t count, float* out);

// gpt-oss's clamped SwiGLU, as ggml's swiglu_oai computes it:
//   g = min(gate[i], limit), u = clamp(up[i], -limit, limit),
//   out[i] = g / (1 + exp(-alpha g)) * (u + 1)
// (alpha 1.702, limit 7 in gpt-oss). out may alias gate.
void swiglu_oai(const float* gate, const float* up, int64_t count, float alpha, float limit,
                float* out);

// out[i] = gelu_tanh(gate[i]) * up[i], for i < count (GeGLU: Gemma's FFN).
// gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))), as
// PyTorch's gelu(approximate="tanh"), evaluated as ggml does on the CPU
// (input and result rounded to f16; 0 / identity beyond ±10), the peer
// Gemma's parity is measured against. out may alias gate.
void geglu(const float* gate, const float* up, int64_t count, float* out);

// x[i] *= c, for i < count.
void scale_inplace(float* x, float c, int64_t count);

// x[i] = cap * tanh(x[i] / cap), for i < count (final logit soft-capping).
void softcap_inplace(float* x, float cap, int64_t count);

// x[i] += y[i]
void add_inplace(float* x, const float* y, int64_t count);

}  // namespace kvasir::cpu
