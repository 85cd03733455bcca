// base/fp8.h — FP8 E4M3 on the host: the reference every FP8 path is held to.
//
// The format ("E4M3FN" of the OCP FP8 spec, CUDA's __nv_fp8_e4m3, the
// F8_E4M3 of safetensors): 1 sign bit, 4 exponent bits (bias 7), 3 mantissa
// bits.
//   exponent field 0:      subnormal, (m / 8) · 2^-6      (smallest 2^-9)
//   exponent field 1..15:  normal,    (1 + m / 8) · 2^(e - 7)
//   S.1111.111 (0x7F, 0xFF): NaN; there are no infinities; ±448 (S.1111.110)
//   is the largest finite value.
// Encoding rounds to the nearest value, ties to even, and saturates
// ("satfinite", cuda_fp8.h's __NV_SATFINITE): a finite value or infinity
// beyond ±448 becomes ±448; every NaN becomes 0x7F (CUDA's conversions do
// the same, checked by tests/unit/kernels_cuda/test_fp8.cpp).
//
// Row quantisation (weights quantised at load, activations before an FP8
// GEMM): one scale per row, scale = amax / 448, codes of x · (448 / amax).
// The CUDA kernels compute exactly these float operations (kernels/cuda/
// fp8_quant.h), so a device result can be compared bit for bit.
#pragma once

#include <cstdint>

namespace kvasir::fp8 {

constexpr float kE4M3Max = 448.f;

// The value of an E4M3 code (NaN for 0x7F and 0xFF). Exact.
float e4m3_to_f32(uint8_t code);

// The code nearest to x (ties to even), saturated to ±448.
uint8_t f32_to_e4m3(float x);

// Quantises a row of n values: q[i] = f32_to_e4m3(x[i] * (448 / amax)),
// amax = the largest |x[i]| (NaNs ignored). Returns the row's scale,
// amax / 448, so that x[i] ≈ scale · e4m3_to_f32(q[i]). A row whose amax is
// 0 or not finite gets scale 1 and is encoded as it is.
float quantize_row_e4m3(const float* x, int64_t n, uint8_t* q);

}  // namespace kvasir::fp8
