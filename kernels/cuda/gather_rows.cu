// Last-token gather: one thread block per output row.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gather_rows.h"
#include "kernels/cuda/paged_kv_layout.h"

namespace kvasir::cuda {
namespace {

__global__ void gather_rows_kernel(const float* x, const int32_t* rows, const int32_t* q_start,
                                   int32_t n_in, int32_t dim, float* out, int32_t* error) {
  const int64_t o = blockIdx.x;
  const int32_t src = rows ? rows[o] : q_start[o + 1] - 1;
  float* dst = out + o * dim;
  if (src < 0 || src >= n_in) {
    if (threadIdx.x == 0) detail::set_error(error, kErrorBatch);
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = __int_as_float(0x7fc00000);
    return;
  }
  const float* s = x + int64_t(src) * dim;
  for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = s[i];
}

}  // namespace

cudaError_t launch_gather_rows(const GatherRowsArgs& a, cudaStream_t stream) {
  if (a.n_in < 0 || a.n_out < 0 || a.dim <= 0) return cudaErrorInvalidValue;
  if (a.n_out == 0) return cudaSuccess;
  if (a.x == nullptr || a.out == nullptr || (a.rows == nullptr && a.q_start == nullptr))
    return cudaErrorInvalidValue;
  gather_rows_kernel<<<a.n_out, 256, 0, stream>>>(a.x, a.rows, a.q_start, a.n_in, a.dim, a.out,
                                                  a.error);
  return detail::launch_result();
}

}  // namespace kvasir::cuda
