// kernels/cpu/matmul_internal.h — shared by the matmul driver and its
// per-format kernels. Not part of the kernels' face.
#pragma once

#include <cstdint>
#include <cstring>

#include "base/dtype.h"
#include "kernels/cpu/simd.h"

namespace kvasir::cpu::detail {

constexpr int kQK = 32;  // weights per quantised block

// An activation block quantised to 8 bits: x ≈ d * q, s = d * sum(q).
struct BlockQ8x {
  float d;
  float s;
  int8_t q[kQK];
};
static_assert(sizeof(BlockQ8x) == 40);

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Dot products of one weight row with nx (1..4) activation rows:
//   y[j * y_stride] = dot(w, x_j),   x_j = x + j * x_stride   (elements of x's type)
// x is const float* for F32/F16/BF16 weights and const BlockQ8x* for
// quantised ones (then cols / 32 blocks per row).
using DotFn = void (*)(const uint8_t* w, const void* x, int64_t x_stride, int nx, int64_t cols,
                       float* y, int64_t y_stride);

// nullptr when the type has no kernel at that level.
DotFn quant_dot_kernel(DType type, SimdLevel level);
DotFn float_dot_kernel(DType type, SimdLevel level);

// Quantises x[cols] (cols % 32 == 0) into cols / 32 blocks. Both levels give
// bit-identical blocks (round half to even, same scale arithmetic).
void quantize_row_q8x(const float* x, int64_t cols, BlockQ8x* out, SimdLevel level);

}  // namespace kvasir::cpu::detail
