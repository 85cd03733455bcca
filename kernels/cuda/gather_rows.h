// kernels/cuda/gather_rows.h — the output head's last-token gather: copies
// selected rows of the residual stream (usually each sequence's last new
// token, q_start[s+1] - 1) into a dense [n_out, dim] buffer, so the final norm
// and the vocabulary GEMM run only on the rows that are sampled.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvasir::cuda {

struct GatherRowsArgs {
  const float* x = nullptr;          // [n_in, dim] f32, device
  const int32_t* rows = nullptr;     // [n_out] indices into x; null = last token of each
                                     // sequence from q_start
  const int32_t* q_start = nullptr;  // [n_out + 1] used when rows is null
  int32_t n_in = 0;
  int32_t n_out = 0;
  int32_t dim = 0;
  float* out = nullptr;      // [n_out, dim] f32
  int32_t* error = nullptr;  // optional flag: kErrorBatch if an index is out of range (row
                             // written as NaN)
};

cudaError_t launch_gather_rows(const GatherRowsArgs& args, cudaStream_t stream);

}  // namespace kvasir::cuda
