// GGUF rows to bf16 on the device (load time only, so plain and simple: one
// thread per output weight, the block header re-read through the cache).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dequant.h"

namespace kvasir::cuda {
namespace {

__device__ __forceinline__ float half_at(const uint8_t* p) {
  const uint16_t bits = uint16_t(p[0]) | uint16_t(p[1]) << 8;  // unaligned-safe
  return __half2float(__ushort_as_half(bits));
}

// row_bytes / block_bytes / block: the type's geometry (base/dtype.h).
__global__ void dequant_kernel(const uint8_t* src, DType type, int64_t n_rows, int64_t n_cols,
                               int64_t row_bytes, __nv_bfloat16* dst) {
  const int64_t n = n_rows * n_cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / n_cols, c = i % n_cols;
    const uint8_t* row = src + r * row_bytes;
    float w = 0.f;
    switch (type) {
      case DType::F32: {
        const uint8_t* p = row + c * 4;
        const uint32_t bits =
            uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
        w = __uint_as_float(bits);
        break;
      }
      case DType::F16:
        w = half_at(row + c * 2);
        break;
      case DType::BF16: {
        const uint8_t* p = row + c * 2;
        dst[i] = __ushort_as_bfloat16(uint16_t(p[0]) | uint16_t(p[1]) << 8);  // exact copy
        continue;
      }
      case DType::Q8_0: {  // { f16 d; int8 q[32]; }
        const uint8_t* b = row + (c / 32) * 34;
        w = half_at(b) * float(int8_t(b[2 + c % 32]));
        break;
      }
      case DType::Q4_0: {  // { f16 d; uint8 qs[16]; }  w = d * (q - 8)
        const uint8_t* b = row + (c / 32) * 18;
        const int e = int(c % 32);
        const uint8_t byte = b[2 + (e & 15)];
        const int q = e < 16 ? (byte & 15) : (byte >> 4);
        w = half_at(b) * float(q - 8);
        break;
      }
      case DType::Q4_1: {  // { f16 d; f16 m; uint8 qs[16]; }  w = d * q + m
        const uint8_t* b = row + (c / 32) * 20;
        const int e = int(c % 32);
        const uint8_t byte = b[4 + (e & 15)];
        const int q = e < 16 ? (byte & 15) : (byte >> 4);
        w = half_at(b) * float(q) + half_at(b + 2);
        break;
      }
      default:
        w = __int_as_float(0x7fc00000);  // unreachable: the launcher refuses other types
    }
    dst[i] = __float2bfloat16_rn(w);
  }
}

}  // namespace

cudaError_t launch_dequant(const DequantArgs& a, cudaStream_t stream) {
  int64_t block = 1, block_bytes = 0;
  switch (a.type) {
    case DType::F32:
      block_bytes = 4;
      break;
    case DType::F16:
    case DType::BF16:
      block_bytes = 2;
      break;
    case DType::Q8_0:
      block = 32, block_bytes = 34;
      break;
    case DType::Q4_0:
      block = 32, block_bytes = 18;
      break;
    case DType::Q4_1:
      block = 32, block_bytes = 20;
      break;
    default:
      return cudaErrorInvalidValue;
  }
  if (a.n_rows < 0 || a.n_cols < 0 || a.n_cols % block != 0) return cudaErrorInvalidValue;
  // n_rows * n_cols elements and n_rows * row_bytes bytes must fit int64.
  constexpr int64_t kMax = int64_t(1) << 50;
  if (a.n_rows > 0 && a.n_cols > kMax / a.n_rows) return cudaErrorInvalidValue;
  const int64_t n = a.n_rows * a.n_cols;
  if (n == 0) return cudaSuccess;
  if (a.src == nullptr || a.dst == nullptr) return cudaErrorInvalidValue;
  const int64_t row_bytes = a.n_cols / block * block_bytes;
  constexpr int kThreads = 256;
  dequant_kernel<<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(
      static_cast<const uint8_t*>(a.src), a.type, a.n_rows, a.n_cols, row_bytes, a.dst);
  return detail::launch_result();
}

}  // namespace kvasir::cuda
