// kernels/cuda/fp8_quant.h — FP8 E4M3 rows on the device: quantising a bf16
// matrix row by row (weights at load for [cuda] quantize = "fp8", and
// activations before an E4M3 GEMM), and the rescaling of an E4M3 GEMM's
// unscaled product.
//
// Quantisation is exactly base/fp8.h's quantize_row_e4m3, float operation
// for float operation: amax = max |x| over the row (NaN ignored), scale =
// amax / 448 (1 when amax is 0 or not finite), code = E4M3 of x · (448 /
// amax), rounded to nearest even and saturated (cuda_fp8.h __NV_SATFINITE).
// The test compares codes and scales bit for bit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvasir::cuda {

struct QuantizeRowsFp8Args {
  const __nv_bfloat16* x = nullptr;  // [n_rows, x_stride] bf16, device
  int64_t n_rows = 0;
  int64_t n_cols = 0;
  int64_t x_stride = 0;    // elements between rows of x; 0 = n_cols
  uint8_t* q = nullptr;    // [n_rows, n_cols] E4M3 codes
  float* scale = nullptr;  // [n_rows]
};

cudaError_t launch_quantize_rows_fp8(const QuantizeRowsFp8Args& args, cudaStream_t stream);

// D[i, j] = alpha · prod[i, j] · row_scale[i] · col_scale[j] (+ beta · D),
// D f32 or bf16: the scales an E4M3 GEMM left out (kernels/cuda/gemm.h).
struct Fp8RescaleArgs {
  const float* prod = nullptr;       // [m, n] f32
  const float* row_scale = nullptr;  // [m]  (activation rows)
  const float* col_scale = nullptr;  // [n]  (weight rows)
  int64_t m = 0, n = 0;
  float alpha = 1.f, beta = 0.f;
  void* d = nullptr;  // [m, n]
  bool d_bf16 = false;
};

cudaError_t launch_fp8_rescale(const Fp8RescaleArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
