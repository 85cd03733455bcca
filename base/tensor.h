// base/tensor.h — a read-only view of a weight tensor, shared by the model
// readers (which produce it) and the kernels (which consume it).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"

namespace kvasir {

// A weight matrix W of shape [rows = ne[1], cols = ne[0]] (GGUF order:
// ne[0] is the innermost, contiguous dimension, i.e. the input size).
// Row r starts at data + r * row_bytes.
struct TensorView {
  DType type = DType::F32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};
  const void* data = nullptr;
  uint64_t nbytes = 0;

  int64_t cols() const { return ne[0]; }
  int64_t rows() const { return ne[1] * ne[2] * ne[3]; }
  uint64_t row_bytes() const { return nbytes / uint64_t(rows() ? rows() : 1); }
};

}  // namespace kvasir
