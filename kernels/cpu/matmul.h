// kernels/cpu/matmul.h — y = x · Wᵀ with W in its stored type.
//
// W is a TensorView of shape [out = rows, in = cols] (GGUF: ne[0] = in).
// Supported weight types: F32, F16, BF16, Q8_0, Q4_0, Q4_1. Quantised types
// quantise each activation row to 8 bits once per call and use integer dot
// products (AVX2 when the CPU has it, chosen at run time; scalar otherwise).
#pragma once

#include <cstdint>

#include "base/tensor.h"
#include "kernels/cpu/thread_pool.h"

namespace kvasir::cpu {

// x: [n, w.cols()] f32, y: [n, w.rows()] f32. Throws kvasir::Error on an
// unsupported type or mismatched shapes.
void matmul(const TensorView& w, const float* x, int64_t n, float* y, ThreadPool* pool);

// Dequantise row r of w into out[w.cols()] (f32). Used for embeddings.
void dequantize_row(const TensorView& w, int64_t r, float* out);

}  // namespace kvasir::cpu
