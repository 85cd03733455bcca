// tests/support/quant.h — plain scalar (de)quantisers for writing test models
// and reading back any tensor as F32. Reference code, not fast.
#pragma once

#include <cstdint>
#include <vector>

#include "base/dtype.h"
#include "base/tensor.h"

namespace kvasir::test {

// n values (a multiple of the block size) in type t: F32, F16, BF16, Q8_0,
// Q4_0, Q4_1 (rounding like ggml's reference quantisers), and Q4_K, Q5_K,
// Q6_K (plain min/max scales, not ggml's search: valid blocks, a little
// more error), MXFP4 (as gguf-py's quantiser).
std::vector<uint8_t> quantize(DType t, const float* x, int64_t n);

// All elements of a tensor of those types, as F32 (row-major, ne[0] fastest).
std::vector<float> dequantize(const TensorView& v);

}  // namespace kvasir::test
