// kernels/cpu/norm.h — RMSNorm and elementwise ops of a Llama block.
#pragma once

#include <cstdint>

namespace kvasir::cpu {

// out[i, :] = x[i, :] / sqrt(mean(x[i, :]²) + eps) * weight   (x, out: [n, dim])
// out may alias x.
void rmsnorm(const float* x, const float* weight, float eps, int64_t n, int64_t dim, float* out);

// out[i] = silu(gate[i]) * up[i], for i < count. out may alias gate.
void swiglu(const float* gate, const float* up, int64_t count, float* out);

// x[i] += y[i]
void add_inplace(float* x, const float* y, int64_t count);

}  // namespace kvasir::cpu
