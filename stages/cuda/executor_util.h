// stages/cuda/executor_util.h — small helpers of the CUDA executor's source
// files (executor.cpp, executor_tail.cpp, executor_weights.cpp); not part of
// any interface.
#pragma once

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <string>

#include "base/status.h"

namespace kvasir::cuda::detail {

// A CUDA runtime call's result: ok, or kOutOfMemory / kDevice naming the call.
inline Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status();
  return Status(e == cudaErrorMemoryAllocation ? ErrorCode::kOutOfMemory : ErrorCode::kDevice,
                fmt::format("{}: {} ({})", what, cudaGetErrorString(e), int(e)));
}

inline Status model_error(std::string text) {
  return Status(ErrorCode::kModelFormat, std::move(text));
}

// A batch the executor refuses: that batch fails, the stage goes on.
inline Status batch_error(std::string text) {
  return Status(ErrorCode::kInvalidArgument, std::move(text));
}

}  // namespace kvasir::cuda::detail
