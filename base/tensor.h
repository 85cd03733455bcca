// base/tensor.h — a read-only view of a weight tensor, shared by the model
// readers (which produce it) and the kernels (which consume it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "base/dtype.h"
#include "base/half.h"

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

// Element i of an F32, F16 or BF16 tensor as f32 (the caller has checked
// the type and the bounds): for small tensors read once, norms and biases.
inline float float_element(const TensorView& t, int64_t i) {
  const auto* p = static_cast<const uint8_t*>(t.data);
  if (t.type == DType::F32) {
    float v;
    std::memcpy(&v, p + 4 * i, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  return t.type == DType::F16 ? fp16_to_f32(h) : bf16_to_f32(h);
}

}  // namespace kvasir
