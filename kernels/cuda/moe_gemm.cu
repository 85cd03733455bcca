// Grouped expert GEMM: block = one row tile (grid x) x 64 output features
// (grid y). 256 threads; each computes 2 rows x 4 features (rows ty, ty+16;
// features tx + 16·j, so the 16 threads of a row read 16 different banks).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe_gemm.h"
#include "kernels/cuda/paged_kv_layout.h"

namespace kvasir::cuda {
namespace {

constexpr int kTm = kMoeTileRows;  // rows per tile (32)
constexpr int kTn = 64;            // output features per block
constexpr int kTk = 32;            // k step
constexpr int kThreads = 256;
static_assert(kTm == 32, "the thread layout below assumes 32-row tiles");

__global__ void __launch_bounds__(kThreads)
    moe_gemm_kernel(const __nv_bfloat16* xs, const __nv_bfloat16* w, const int32_t* offsets,
                    const int32_t* tile_expert, const int32_t* tile_row, int64_t rows,
                    int32_t n_experts, int64_t n_out, int64_t k, float* y, int32_t* error) {
  __shared__ float sx[kTm][kTk + 1];
  __shared__ float sw[kTn][kTk + 1];
  const int32_t e = tile_expert[blockIdx.x];
  if (e < 0) return;  // an unused tile
  const int32_t r0 = tile_row[blockIdx.x];
  if (e >= n_experts) {
    if (threadIdx.x == 0) detail::set_error(error, kErrorExpertId);
    return;
  }
  // The tile's rows, clipped to its expert's range (and to the buffer, in
  // case the tile map is malformed).
  int64_t r_end = offsets[e + 1];
  if (r_end > r0 + kTm) r_end = r0 + kTm;
  if (r_end > rows) r_end = rows;
  if (r0 < offsets[e] || r0 >= r_end) {
    if (r0 < offsets[e] && threadIdx.x == 0) detail::set_error(error, kErrorExpertId);
    return;
  }
  const int n_rows = int(r_end - r0);
  const int64_t c0 = int64_t(blockIdx.y) * kTn;
  const __nv_bfloat16* we = w + int64_t(e) * n_out * k;
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;

  float acc[2][4] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kTk) {
    // Coalesced loads: consecutive threads take consecutive k; zeros past
    // the edges so the inner loop needs no bounds.
    for (int i = threadIdx.x; i < kTm * kTk; i += kThreads) {
      const int rr = i / kTk, kk = i % kTk;
      sx[rr][kk] = (rr < n_rows && k0 + kk < k)
                       ? __bfloat162float(xs[(int64_t(r0) + rr) * k + k0 + kk])
                       : 0.f;
    }
    for (int i = threadIdx.x; i < kTn * kTk; i += kThreads) {
      const int cc = i / kTk, kk = i % kTk;
      sw[cc][kk] =
          (c0 + cc < n_out && k0 + kk < k) ? __bfloat162float(we[(c0 + cc) * k + k0 + kk]) : 0.f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kTk; ++kk) {
      const float a0 = sx[ty][kk], a1 = sx[ty + 16][kk];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float b = sw[tx + 16 * j][kk];
        acc[0][j] = fmaf(a0, b, acc[0][j]);
        acc[1][j] = fmaf(a1, b, acc[1][j]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int rr = ty + 16 * i;
    if (rr >= n_rows) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t c = c0 + tx + 16 * j;
      if (c < n_out) y[(int64_t(r0) + rr) * n_out + c] = acc[i][j];
    }
  }
}

}  // namespace

cudaError_t launch_moe_gemm(const MoeGemmArgs& a, cudaStream_t stream) {
  if (a.n_tiles < 0 || a.n_tiles > INT32_MAX || a.rows < 0 || a.rows > INT32_MAX)
    return cudaErrorInvalidValue;
  if (a.n_experts < 1 || a.n_experts > kMoeMaxExperts || a.n_out < 1 || a.k < 1)
    return cudaErrorInvalidValue;
  // Overflow of the stack and of the buffers (elements, 2^50 as elsewhere).
  if (a.n_out > (int64_t(1) << 50) / a.k || a.n_out * a.k > (int64_t(1) << 50) / a.n_experts)
    return cudaErrorInvalidValue;
  if (a.rows > 0 && (a.k > (int64_t(1) << 50) / a.rows || a.n_out > (int64_t(1) << 50) / a.rows))
    return cudaErrorInvalidValue;
  const int64_t col_blocks = (a.n_out + kTn - 1) / kTn;
  if (col_blocks > 65535) return cudaErrorInvalidValue;  // grid y
  if (a.n_tiles == 0 || a.rows == 0) return cudaSuccess;
  if (a.xs == nullptr || a.w == nullptr || a.offsets == nullptr || a.tile_expert == nullptr ||
      a.tile_row == nullptr || a.y == nullptr)
    return cudaErrorInvalidValue;
  const dim3 grid(unsigned(a.n_tiles), unsigned(col_blocks));
  moe_gemm_kernel<<<grid, kThreads, 0, stream>>>(a.xs, a.w, a.offsets, a.tile_expert, a.tile_row,
                                                 a.rows, a.n_experts, a.n_out, a.k, a.y, a.error);
  return detail::launch_result();
}

}  // namespace kvasir::cuda
